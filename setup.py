"""Ships the top-level environments/ folder inside the wheel as envgym/environments/ (see envgym.registry)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithEnvironments(build_py):
    def run(self) -> None:
        super().run()
        source = Path(__file__).parent / "environments"
        target = Path(self.build_lib) / "envgym" / "environments"
        shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildWithEnvironments})
