"""The session's real OpenAI-compatible server (`transformers serve`) lives in tests/openai_server.py and is registered
in tests/conftest.py, so tests/llm and tests/train share one process; `Server` is re-exported for these tests."""

from tests.openai_server import Server

__all__ = ["Server"]
