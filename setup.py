"""Ships the top-level data folders inside the wheel: environments/ as envgym/environments/ (see
envgym.registry) and k8s/ as envgym/k8s/ (see envgym.deploy), so an installed envgym finds both."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DATA_FOLDERS = ("environments", "k8s")


class BuildWithDataFolders(build_py):
    def run(self) -> None:
        super().run()
        for folder in DATA_FOLDERS:
            source = Path(__file__).parent / folder
            target = Path(self.build_lib) / "envgym" / folder
            shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildWithDataFolders})
