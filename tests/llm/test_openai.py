"""OpenAIChatModel against a real HTTP server speaking the chat-completions wire format."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from envgym.llm.openai import OpenAIChatModel, OpenAIServerError

TOOLS = [{"type": "function", "function": {"name": "multiply", "parameters": {"type": "object"}}}]


class ChatCompletionsHandler(BaseHTTPRequestHandler):
    """A vLLM-like server: tool calls when tools are offered, `token:<id>` logprobs when asked."""

    requests: ClassVar[list[tuple[dict[str, Any], str | None]]] = []

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((body, self.headers.get("Authorization")))
        if self.path != "/v1/chat/completions" or body.get("model") != "tiny":
            self._send(404, {"error": {"message": f"unknown model {body.get('model')}"}})
            return
        choices = []
        for index in range(body.get("n", 1)):
            message: dict[str, Any] = {"role": "assistant", "content": f"reply {index}"}
            if body.get("tools"):
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "multiply", "arguments": '{"a": 12, "b": 34}'},
                        },
                        {
                            "id": "c2",
                            "type": "function",
                            "function": {"name": "multiply", "arguments": '{"a": 5, "b": 6}'},
                        },
                    ],
                }
            choice: dict[str, Any] = {"index": index, "message": message, "finish_reason": "stop"}
            if body.get("logprobs") and body.get("return_tokens_as_token_ids"):
                choice["logprobs"] = {
                    "content": [
                        {"token": f"token:{100 + index}", "logprob": -0.5},
                        {"token": "token:2", "logprob": -0.25},
                    ]
                }
            choices.append(choice)
        payload: dict[str, Any] = {
            "id": "x",
            "object": "chat.completion",
            "choices": choices,
            "usage": {"prompt_tokens": 7, "completion_tokens": 2},
        }
        if body.get("return_token_ids"):
            payload["prompt_token_ids"] = [1, 2, 3]
        self._send(200, payload)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def server_url() -> Iterator[str]:
    ChatCompletionsHandler.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), ChatCompletionsHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_plain_reply_and_request_body(server_url: str) -> None:
    model = OpenAIChatModel("tiny", base_url=server_url, api_key="secret")
    response = model.chat([{"role": "user", "content": "hi"}], max_tokens=9, temperature=0.5, seed=4)
    assert response.text == "reply 0"
    assert response.completion_token_ids is None
    assert response.usage == {"prompt_tokens": 7, "completion_tokens": 2}
    body, auth = ChatCompletionsHandler.requests[-1]
    assert (body["max_tokens"], body["temperature"], body["seed"], body["n"]) == (9, 0.5, 4, 1)
    assert "logprobs" not in body
    assert auth == "Bearer secret"


def test_api_key_comes_from_the_named_env_var(server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "from-env")
    OpenAIChatModel("tiny", base_url=server_url, api_key_env="MY_KEY").chat(
        [{"role": "user", "content": "x"}]
    )
    assert ChatCompletionsHandler.requests[-1][1] == "Bearer from-env"


def test_tool_calls_become_hermes_text_blocks(server_url: str) -> None:
    response = OpenAIChatModel("tiny", base_url=server_url).chat([{"role": "user", "content": "x"}], TOOLS)
    blocks = response.text.split("</tool_call>")
    assert response.text.count("<tool_call>") == 2
    assert json.loads(blocks[0].removeprefix("<tool_call>")) == {
        "name": "multiply",
        "arguments": {"a": 12, "b": 34},
    }
    assert ChatCompletionsHandler.requests[-1][0]["tools"] == TOOLS


def test_group_with_token_ids_and_logprobs(server_url: str) -> None:
    model = OpenAIChatModel("tiny", base_url=server_url, token_ids=True)
    responses = model.generate_group([{"role": "user", "content": "x"}], 3)
    assert [r.completion_token_ids for r in responses] == [[100, 2], [101, 2], [102, 2]]
    assert responses[0].completion_logprobs == [-0.5, -0.25]
    assert responses[0].prompt_token_ids == [1, 2, 3]


def test_server_error_names_url_and_status(server_url: str) -> None:
    with pytest.raises(OpenAIServerError, match=r"chat/completions returned 404: .*unknown model other"):
        OpenAIChatModel("other", base_url=server_url).chat([{"role": "user", "content": "x"}])
