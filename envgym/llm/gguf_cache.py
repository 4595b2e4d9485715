"""A converted cache of GGUF models, so a process loads SmolLM2 in seconds instead of ~40 s.

Reading a GGUF file through transformers parses its metadata (the whole vocabulary and merges) and dequantizes
every tensor, on every load, in every process: the test suite, the eval CLI, each torchrun rank. The first load
of a file writes what came out of it to a cache folder; later loads read that instead:

    $ENVGYM_CACHE/models/<stem>-<sha256[:16]>/transformers-<version>/   ($ENVGYM_CACHE: ~/.cache/envgym)
        tokenizer/   the fast tokenizer files and chat template (`save_pretrained`)
        model/       config.json, generation_config.json, model.safetensors (the dequantized float32 tensors)

keyed by the GGUF file's content hash and the transformers version that converted it. Each part appears whole or
not at all: it is written to a temporary folder beside it and renamed into place, so of two processes converting
at once one publishes and the other uses what was published. Each part ends with `envgym-cache.json`, listing
every file with its size and sha256; a part whose files do not match it (truncated, corrupted, hand-edited) is
removed and converted again, never used. Set ENVGYM_MODEL_CACHE=0 to read the GGUF file on every load.

The cached model holds the same tensors (bit for bit) in the same class, with the same config except that it is
not flagged as GGUF-quantized: its weights are plain float tensors either way, and unflagged `save_pretrained`
works. tests/llm/test_gguf_cache.py compares both against a fresh GGUF load.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORMAT = 1
"""Bumped whenever the layout or the conversion changes, so older entries are not read."""
MANIFEST = "envgym-cache.json"
WEIGHTS = "model.safetensors"
CACHE_SWITCH = "ENVGYM_MODEL_CACHE"

log = logging.getLogger(__name__)


def cache_enabled() -> bool:
    return os.environ.get(CACHE_SWITCH, "1").strip().lower() not in {"0", "false", "no", "off"}


def models_root() -> Path:
    return Path(os.environ.get("ENVGYM_CACHE", Path.home() / ".cache" / "envgym")) / "models"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


@functools.lru_cache(maxsize=8)
def _gguf_sha256(path: str, size: int, mtime_ns: int) -> str:
    """The file's digest, once per process for each (path, size, mtime)."""
    return _sha256(Path(path))


def gguf_sha256(gguf: Path) -> str:
    stat = gguf.stat()
    return _gguf_sha256(str(gguf.resolve()), stat.st_size, stat.st_mtime_ns)


def entry_dir(gguf: Path) -> Path:
    """The folder holding both converted parts of `gguf` for the running transformers version."""
    import transformers

    return models_root() / f"{gguf.stem}-{gguf_sha256(gguf)[:16]}" / f"transformers-{transformers.__version__}"


def _manifest(gguf: Path, kind: str, folder: Path) -> dict[str, Any]:
    import transformers

    files = {
        p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST
    }
    return {"format": FORMAT, "kind": kind, "source": gguf.name, "sha256": gguf_sha256(gguf),
            "transformers": transformers.__version__, "files": files}


def problem(gguf: Path, kind: str, folder: Path) -> str | None:
    """Why the cached `kind` part at `folder` must not be used (None: it is whole and of this GGUF file)."""
    manifest_path = folder / MANIFEST
    try:
        recorded = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{manifest_path} is missing"
    except (OSError, ValueError) as exc:
        return f"{manifest_path} is unreadable: {exc}"
    if not isinstance(recorded, dict) or not isinstance(recorded.get("files"), dict):
        return f"{manifest_path} is not a manifest"
    expected = _manifest(gguf, kind, folder)
    for key in ("format", "kind", "sha256", "transformers"):
        if recorded.get(key) != expected[key]:
            return f"{manifest_path}: {key} is {recorded.get(key)!r}, expected {expected[key]!r}"
    if recorded["files"] != expected["files"]:
        changed = sorted(set(recorded["files"]) ^ set(expected["files"]) | {
            name for name in set(recorded["files"]) & set(expected["files"])
            if recorded["files"][name] != expected["files"][name]
        })
        return f"{folder}: files differ from {MANIFEST}: {', '.join(changed)}"
    return None


def _discard(folder: Path) -> None:
    """Remove `folder` without ever leaving a half-deleted one under its name: rename it aside, then delete."""
    aside = folder.with_name(f".discard-{folder.name}-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.rename(folder, aside)
    except FileNotFoundError:
        return  # another process discarded it first
    shutil.rmtree(aside, ignore_errors=True)


def _publish(gguf: Path, kind: str, folder: Path, write: Callable[[Path], None]) -> None:
    """Write the part with `write(staging)` beside `folder`, then rename it into place (a loser of a race drops its
    own copy: the winner's is the same conversion)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{kind}.", dir=folder.parent))
    try:
        write(staging)
        manifest = _manifest(gguf, kind, staging)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        try:
            os.rename(staging, folder)
        except OSError:
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def cached(gguf: Path, kind: str, convert: Callable[[], Any], write: Callable[[Any, Path], None],
           read: Callable[[Path], Any]) -> Any:
    """`read(folder)` of the cached `kind` part of `gguf`, converting it first (`convert()`, then `write(it,
    staging)`) when it is missing or fails its manifest. Without a usable cache, `convert()` itself."""
    if not cache_enabled():
        return convert()
    folder = entry_dir(gguf) / kind
    why = problem(gguf, kind, folder) if folder.exists() else None
    if why is None and folder.exists():
        return read(folder)
    if why is not None:
        log.warning("model cache: %s; converting %s again", why, gguf.name)
        _discard(folder)
    converted = convert()
    try:
        _publish(gguf, kind, folder, lambda staging: write(converted, staging))
    except OSError as exc:
        log.warning("model cache: cannot write %s (%s); using the GGUF load", folder, exc)
        return converted
    why = problem(gguf, kind, folder)
    if why is not None:
        log.warning("model cache: %s right after writing it; using the GGUF load", why)
        return converted
    return read(folder)


def gguf_tokenizer(gguf: Path) -> Any:
    """The tokenizer and chat template read from the GGUF file itself (no cache)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def gguf_model(gguf: Path) -> Any:
    """The model dequantized from the GGUF file itself (no cache), in eval mode."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model.eval()
    return model


def _write_tokenizer(tokenizer: Any, staging: Path) -> None:
    tokenizer.save_pretrained(str(staging))


def _read_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _write_model(model: Any, staging: Path) -> None:
    """config, generation config and weights, written by hand: `save_pretrained` refuses a GGUF-flagged model."""
    from safetensors.torch import save_file

    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_name_or_path", None)
    plain = type(model.config).from_dict(config)
    plain.architectures = [type(model).__name__]
    plain.save_pretrained(str(staging))
    model.generation_config.save_pretrained(str(staging))
    tensors: dict[str, Any] = {}
    stored: dict[tuple[int, tuple[int, ...]], str] = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key in stored:
            continue  # a tied weight (lm_head is embed_tokens): from_pretrained ties it again from the config
        stored[key] = name
        tensors[name] = tensor.detach().contiguous()
    save_file(tensors, str(staging / WEIGHTS), metadata={"format": "pt"})


def _read_model(folder: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    model.eval()
    return model


def load_tokenizer(gguf: Path) -> Any:
    """The tokenizer of `gguf`, from the cache (converted on the first call)."""
    return cached(gguf, "tokenizer", lambda: gguf_tokenizer(gguf), _write_tokenizer, _read_tokenizer)


def load_model(gguf: Path) -> Any:
    """The float32 model of `gguf`, in eval mode, from the cache (converted on the first call)."""
    return cached(gguf, "model", lambda: gguf_model(gguf), _write_model, _read_model)
