"""Builds the sandbox image offline: a Debian bookworm root made by debootstrap, with no registry.

Two layers: a base image (`docker import` of a minbase root with python3 plus envgym's runtime
dependencies copied from this interpreter's site-packages), rebuilt only when those change, and on
top of it the envgym sources (`docker build` from the local base), tagged by a hash of the sources.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path

import docker
from packaging.requirements import Requirement
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

IMAGE_REPO = "envgym-sandbox"
BASE_REPO = "envgym-sandbox-base"
SUITE = "bookworm"
# What the in-sandbox server and hosted environments import; their dependency closure is copied too.
RUNTIME_DISTRIBUTIONS = ("pydantic", "gymnasium", "numpy", "PyYAML", "Faker", "jsonschema", "httpx")
_REPO_ROOT = Path(__file__).resolve().parents[2]
_SOURCE_DIRS = ("envgym", "environments")
# Bytecode is compiled at build time: the root is read-only at run time, and compiling on every
# start would add seconds to each cold start.
_BASE_DOCKERFILE = """FROM {raw}
RUN python3 -m compileall -q -j 0 /opt/envgym/lib
"""
_TOP_DOCKERFILE = """FROM {base}
COPY src /opt/envgym/src
RUN python3 -m compileall -q -j 0 /opt/envgym/src
LABEL envgym.source-hash={source_hash}
"""


def cache_dir() -> Path:
    path = Path(os.environ.get("ENVGYM_CACHE", Path.home() / ".cache" / "envgym")) / "sandbox"
    path.mkdir(parents=True, exist_ok=True)
    return path


def debian_mirror() -> str:
    """The machine's Debian mirror (from /etc/apt), so the build uses what apt already reaches."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        for line in legacy.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and "security" not in parts[1]:
                return parts[1]
    return "http://deb.debian.org/debian"


def runtime_distributions(roots: Iterable[str] = RUNTIME_DISTRIBUTIONS) -> list[md.Distribution]:
    """`roots` and everything they require (markers evaluated for this interpreter, extras skipped)."""
    seen: dict[str, md.Distribution] = {}
    stack = list(roots)
    while stack:
        name = stack.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError as exc:
            raise RuntimeError(
                f"sandbox image: dependency {name!r} is not installed here; pip install it"
            ) from exc
        seen[key] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                stack.append(req.name)
    return sorted(seen.values(), key=lambda d: d.metadata["Name"].lower())


def _hash(parts: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def base_tag(dists: list[md.Distribution]) -> str:
    key = _hash([SUITE.encode(), *(f"{d.metadata['Name']}=={d.version}".encode() for d in dists)])
    return f"{BASE_REPO}:{key}"


def _source_files() -> list[Path]:
    found = []
    for top in _SOURCE_DIRS:
        for path in sorted((_REPO_ROOT / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found.append(path)
    return found


def source_hash() -> str:
    files = _source_files()
    return _hash(b for f in files for b in (str(f.relative_to(_REPO_ROOT)).encode(), f.read_bytes()))


def image_tag() -> str:
    return f"{IMAGE_REPO}:src-{source_hash()}"


def _debootstrap(progress: Progress) -> Path:
    rootfs = cache_dir() / f"rootfs-{SUITE}"
    if (rootfs / "usr" / "bin" / "python3").exists():
        return rootfs
    if shutil.which("debootstrap") is None:
        raise RuntimeError("sandbox image: debootstrap is missing; apt-get install -y debootstrap")
    partial = cache_dir() / f"rootfs-{SUITE}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    task = progress.add_task(f"debootstrap {SUITE} (minbase + python3) from {debian_mirror()}", total=None)
    subprocess.run(
        ["debootstrap", "--variant=minbase", "--include=python3", SUITE, str(partial), debian_mirror()],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    partial.rename(rootfs)
    progress.update(task, completed=1, total=1)
    return rootfs


def _import_base(client: docker.DockerClient, rootfs: Path, dists: list[md.Distribution], tag: str) -> None:
    """`docker import` of rootfs plus the dependencies under /opt/envgym/lib."""
    with tempfile.NamedTemporaryFile(suffix=".tar") as tmp:
        with tarfile.open(fileobj=tmp, mode="w") as tar:
            skip = (
                "./var/cache/apt/archives/",
                "./var/lib/apt/lists/",
                "./usr/share/doc/",
                "./usr/share/man/",
            )

            def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
                return None if info.name.startswith(skip) and not info.isdir() else info

            tar.add(str(rootfs), arcname=".", filter=keep)
            for d in ("opt", "opt/envgym", "opt/envgym/lib", "opt/envgym/src", "workspace", "run/envgym"):
                if (rootfs / d).exists():
                    continue
                info = tarfile.TarInfo(f"./{d}")
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            added: set[str] = set()
            for dist in dists:
                for rel in dist.files or []:
                    src = Path(str(dist.locate_file(rel)))
                    arcname = f"./opt/envgym/lib/{rel.as_posix()}"
                    if (
                        ".." in rel.parts
                        or "__pycache__" in rel.parts
                        or arcname in added
                        or not src.is_file()
                    ):
                        continue
                    added.add(arcname)
                    tar.add(str(src), arcname=arcname)
        tmp.flush()
        changes = [
            "ENV PYTHONPATH=/opt/envgym/src:/opt/envgym/lib",
            "ENV PYTHONDONTWRITEBYTECODE=1",
            "ENV LANG=C.UTF-8",
            "WORKDIR /workspace",
            'CMD ["python3", "-m", "envgym.sandbox.server", "--help"]',
        ]
        repo, _, version = tag.partition(":")
        client.api.import_image_from_file(tmp.name, repository=repo, tag=f"{version}-raw", changes=changes)
    with tempfile.TemporaryDirectory() as ctx:
        (Path(ctx) / "Dockerfile").write_text(_BASE_DOCKERFILE.format(raw=f"{tag}-raw"))
        client.images.build(path=ctx, tag=tag, pull=False, rm=True, forcerm=True)


def _build_top(client: docker.DockerClient, base: str, tag: str, source_hash_: str) -> None:
    with tempfile.TemporaryDirectory() as ctx:
        for path in _source_files():
            dest = Path(ctx) / "src" / path.relative_to(_REPO_ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        (Path(ctx) / "Dockerfile").write_text(_TOP_DOCKERFILE.format(base=base, source_hash=source_hash_))
        client.images.build(path=ctx, tag=tag, pull=False, rm=True, forcerm=True)
    client.images.get(tag).tag(IMAGE_REPO, "latest")


def _exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def ensure_image(
    client: docker.DockerClient | None = None, *, rebuild: bool = False, quiet: bool = False
) -> str:
    """Build whatever part of the sandbox image is missing or stale; returns the image tag to run."""
    client = client or docker.from_env()
    dists = runtime_distributions()
    base = base_tag(dists)
    digest = source_hash()
    tag = f"{IMAGE_REPO}:src-{digest}"
    if not rebuild and _exists(client, tag):
        client.images.get(tag).tag(IMAGE_REPO, "latest")
        return tag
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, disable=quiet, transient=False) as progress:
        if rebuild or not _exists(client, base):
            rootfs = _debootstrap(progress)
            task = progress.add_task(f"docker import {base} ({len(dists)} python distributions)", total=1)
            _import_base(client, rootfs, dists, base)
            progress.update(task, completed=1)
        task = progress.add_task(f"docker build {tag} (envgym sources)", total=1)
        _build_top(client, base, tag, digest)
        progress.update(task, completed=1)
    return tag


def image_summary(client: docker.DockerClient, tag: str) -> dict[str, object]:
    image = client.images.get(tag)
    return {"tag": tag, "id": image.short_id, "size_mb": round(image.attrs["Size"] / 1e6, 1)}
