"""The vLLM and SGLang samplers against a RECORDED EXCHANGE, not a live engine: neither runs on this CPU-only CI.

tests/train/data/server_exchange.json holds request/reply pairs in the formats the projects document (its
`about` says where each comes from). A small loopback HTTP server replays them: it answers a request only when
the body the client sent equals the recorded request, so the tests check what goes over the wire (token-id
prompts, per-row seeds, logprob flags, push endpoints) and what is read back (exact ids, logprobs, end).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from envgym.train.policy import tiny_random_policy
from envgym.train.server_engines import build_server_sampler
from envgym.train.server_sampler import ServerSamplerError

EXCHANGE = json.loads((Path(__file__).parent / "data" / "server_exchange.json").read_text())
WILDCARDS = ("<adapter>", "<path>")


def _matches(recorded: Any, sent: Any) -> bool:
    if isinstance(recorded, str) and recorded in WILDCARDS:
        return isinstance(sent, str)
    if isinstance(recorded, dict):
        return isinstance(sent, dict) and recorded.keys() == sent.keys() and all(
            _matches(recorded[k], sent[k]) for k in recorded)
    return bool(recorded == sent)


class Replay:
    """A loopback server answering with the recorded reply whose request equals the one received."""

    def __init__(self, exchange: list[dict[str, Any]]) -> None:
        self.exchange = exchange
        self.received: list[tuple[str, dict[str, Any]]] = []
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                replay.received.append((self.path, body))
                found = next((e for e in replay.exchange if e["path"] == self.path and _matches(e["request"], body)),
                             None)
                status = found["status"] if found else 404
                reply = found["response"] if found else {"error": f"no recorded exchange for {self.path} {body}"}
                data = (reply if isinstance(reply, str) else json.dumps(reply)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(reply, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"
        threading.Thread(target=self.http.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def paths(self) -> list[str]:
        return [path for path, _ in self.received]


@pytest.fixture
def replay(request: pytest.FixtureRequest) -> Iterator[Replay]:
    server = Replay(EXCHANGE[request.param])
    yield server
    server.http.shutdown()


@pytest.fixture(scope="module")
def lora_policy() -> tuple[Any, Any]:
    from peft import LoraConfig, get_peft_model

    model, tokenizer = tiny_random_policy(0)
    return get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM")), tokenizer


def _sample(sampler: Any) -> list[Any]:
    prompt = EXCHANGE["prompt"]
    return sampler.sample([prompt, prompt], max_new_tokens=EXCHANGE["max_new_tokens"], temperature=1.0,
                          seed=EXCHANGE["seed"])


def _check_samples(samples: list[Any]) -> None:
    for sample, expected in zip(samples, EXCHANGE["expected"], strict=True):
        assert (sample.token_ids, sample.logprobs, sample.finished) == (
            expected["token_ids"], expected["logprobs"], expected["finished"])
        assert sample.verified


@pytest.mark.parametrize("replay", ["vllm"], indirect=True)
def test_vllm_pushes_lora_adapters_and_returns_the_servers_ids_and_logprobs(
    replay: Replay, lora_policy: tuple[Any, Any], tmp_path: Path
) -> None:
    model, tokenizer = lora_policy
    sampler = build_server_sampler("vllm", replay.url, tokenizer, push_dir=tmp_path)
    sampler.push_weights(model, 0)
    _, load = replay.received[-1]
    assert (Path(load["lora_path"]) / "adapter_config.json").is_file()
    _check_samples(_sample(sampler))
    requests = [body for path, body in replay.received if path == "/v1/completions"]
    assert {r["model"] for r in requests} == {load["lora_name"]}  # the pushed adapter answers
    assert len({r["seed"] for r in requests}) == 2  # each row its own seed: a group's G prompts are identical
    sampler.push_weights(model, 1)
    assert replay.paths()[-2:] == ["/v1/load_lora_adapter", "/v1/unload_lora_adapter"]
    assert replay.received[-1][1]["lora_name"] == load["lora_name"] != sampler.model_name


@pytest.mark.parametrize("replay", ["vllm"], indirect=True)
def test_vllm_refuses_full_weights_and_names_the_way_out(replay: Replay, tmp_path: Path) -> None:
    model, tokenizer = tiny_random_policy(0)
    sampler = build_server_sampler("vllm", replay.url, tokenizer, push_dir=tmp_path)
    with pytest.raises(ServerSamplerError, match="only as LoRA adapters"):
        sampler.push_weights(model, 0)
    with pytest.raises(ServerSamplerError, match=r"push_weights\(model, version\) before sampling"):
        _sample(sampler)
    assert replay.received == []


@pytest.mark.parametrize("replay", ["sglang"], indirect=True)
def test_sglang_pushes_full_weights_from_disk_and_returns_the_servers_ids_and_logprobs(
    replay: Replay, lora_policy: tuple[Any, Any], tmp_path: Path
) -> None:
    model, tokenizer = lora_policy
    sampler = build_server_sampler("sglang", replay.url, tokenizer, push_dir=tmp_path)
    sampler.push_weights(model, 0)  # LoRA merged into full weights
    _, load = replay.received[-1]
    assert (Path(load["model_path"]) / "config.json").is_file()
    assert not (Path(load["model_path"]) / "adapter_config.json").exists()
    _check_samples(_sample(sampler))


@pytest.mark.parametrize("replay", ["sglang"], indirect=True)
def test_a_reply_that_contradicts_itself_or_an_error_status_is_a_clear_error(replay: Replay, tmp_path: Path) -> None:
    model, tokenizer = tiny_random_policy(0)
    sampler = build_server_sampler("sglang", replay.url, tokenizer, push_dir=tmp_path)
    sampler.push_weights(model, 0)
    replay.exchange = [dict(e) for e in replay.exchange]
    generate = next(e for e in replay.exchange if e["path"] == "/generate")
    generate["response"] = {**generate["response"], "output_ids": [1, 2, 3]}
    with pytest.raises(ServerSamplerError, match="disagree with the logprob tokens"):
        sampler.sample([EXCHANGE["prompt"]], max_new_tokens=EXCHANGE["max_new_tokens"], temperature=1.0,
                       seed=EXCHANGE["seed"])
    with pytest.raises(ServerSamplerError, match=r"/generate answered 404: .*no recorded exchange"):
        sampler.sample([[5, 6]], max_new_tokens=1, temperature=1.0, seed=0)


def test_ranks_take_servers_round_robin_and_sglang_gets_one_per_rank() -> None:
    from envgym.train.server_engines import server_for_rank

    urls = "http://a:8000, http://b:8000"
    assert [server_for_rank(urls, "transformers", r, 4) for r in range(4)] == [
        "http://a:8000", "http://b:8000", "http://a:8000", "http://b:8000"]
    assert server_for_rank("http://a:8000", "vllm", 1, 2) == "http://a:8000"  # own adapter names: may share
    assert server_for_rank(urls, "sglang", 1, 2) == "http://b:8000"
    with pytest.raises(ValueError, match=r"sglang: 3 ranks share 2 server\(s\)"):
        server_for_rank(urls, "sglang", 0, 3)
    with pytest.raises(ValueError, match="names no server"):
        server_for_rank(" , ", "transformers", 0, 1)


def test_a_push_folder_is_complete_on_any_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by a 2-rank run against transformers serve: under torch.distributed, save_pretrained writes weights and
    # config on rank 0 only, so rank 1's push folder held a tokenizer and nothing the server could load.
    import transformers.distributed.mixin as mixin  # where transformers 5.24 decides which rank writes
    from transformers import AutoModelForCausalLM

    from envgym.train.server_sampler import save_full_model

    monkeypatch.setattr(mixin, "_is_torch_distributed_initialized", lambda: True)
    monkeypatch.setattr(mixin, "_get_torch_distributed_rank", lambda: 1)
    import torch

    model, tokenizer = tiny_random_policy(0)
    save_full_model(model, tokenizer, tmp_path / "v0")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "v0")
    original = model.state_dict()
    assert loaded.state_dict().keys() == original.keys()
    assert all(torch.equal(tensor, original[name]) for name, tensor in loaded.state_dict().items())
    assert "should_save_on_this_rank" not in vars(model)  # the policy itself is left as it was
