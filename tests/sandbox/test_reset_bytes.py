"""A reset's answer is the same bytes for the same seed, however cheaply the host and the env now make it: the tool
RNG built on first use (envgym.env) and the tool schemas' JSON kept per session (envgym.sandbox.tools_json)."""

from __future__ import annotations

import hashlib

import gymnasium as gym
from pydantic_core import to_json

from envgym.sandbox import tools_json
from envgym.sandbox.server_env import EnvHost, encode_result
from envgym.sandbox.tools_json import ToolsJSON
from envgym.sandbox.wire import EnvCreate, EnvResetResult

READ = '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W0071"}}</tool_call>'

# sha256 over the answers below, written by the code before these caches (commit da6c824). If a bundled world's
# data or prompts change on purpose, the digest changes too: pin the new one from that commit's parent's output.
BEFORE_CACHES = "ba3368d84a982f31d5ed918d6630d4aab5132fe94289ff45c9f759db0ac909df"


def _session(env_id: str, **kwargs: object) -> tuple[EnvHost, str]:
    host = EnvHost(env_id)
    return host, host.create(EnvCreate.model_validate({"env_id": env_id, "kwargs": kwargs})).session_id


def test_reset_and_step_answers_are_the_bytes_the_code_before_the_caches_gave() -> None:
    digest = hashlib.sha256()
    for env_id in ("envgym/retail-v0", "envgym/calculator-v0"):
        host, sid = _session(env_id)
        for seed in range(5):
            for delta in (False, True):
                digest.update(host.reset(sid, seed, None, delta))
    # Faults drawn from the tool RNG: its seed must be the one reset drew, however late it is built.
    host, sid = _session("envgym/retail-v0", failure_rate=0.5)
    for seed in range(5):
        digest.update(host.reset(sid, seed, None, False))
        for _ in range(4):
            digest.update(host.step(sid, READ))
    assert digest.hexdigest() == BEFORE_CACHES


def test_a_reset_answer_is_the_whole_info_encoded_whatever_was_cached() -> None:
    host, sid = _session("envgym/retail-v0")
    env = gym.make("envgym/retail-v0")
    for seed in (3, 3, 7, None, 11):
        body = host.reset(sid, seed, None, False)
        if seed is None:
            continue
        obs, info = env.reset(seed=seed)
        assert body == encode_result(EnvResetResult, observation=obs, info=info)
        assert body == to_json({"observation": obs, "info": info})


def test_an_info_that_quotes_the_marker_is_encoded_whole() -> None:
    tools = [{"type": "function", "function": {"name": "t", "description": "x" * 2000}}]
    info = {"messages": [{"role": "user", "content": tools_json._MARK}], "tools": tools}

    def encode(i: dict[str, object]) -> bytes:
        return to_json({"info": i})

    cache = ToolsJSON()
    assert cache.encode(info, encode) == encode(info)
    assert cache.encode(info, encode) == encode(info)  # cached now, same answer


def test_a_new_tools_list_is_encoded_again() -> None:
    cache = ToolsJSON()

    def encode(i: dict[str, object]) -> bytes:
        return to_json(i)

    long = "x" * 2000  # over the size below which tools are encoded with the rest
    first = {"tools": [{"name": "a", "description": long}], "step": 0}
    second = {"tools": [{"name": "b", "description": long}], "step": 0}
    assert cache.encode(first, encode) == encode(first)
    assert cache.encode(second, encode) == encode(second)
    assert b'"name":"b"' in cache.encode(second, encode)
