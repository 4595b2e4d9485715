"""The vLLM and SGLang wire formats of `envgym.train.server_sampler`: token ids in, exact ids and logprobs out.

Neither engine runs on this project's CPU-only CI, so these clients are tested against a recorded exchange
(tests/train/data/server_exchange.json, built from the projects' documented formats), not a live engine.

vLLM (OpenAI-compatible server, https://docs.vllm.ai: "OpenAI-Compatible Server", "LoRA Adapters"):
- `POST /v1/completions` with `prompt` a list of token ids, `logprobs: 0` (the sampled token's logprob),
  `return_tokens_as_token_ids: true` (each logprob token comes back as `"token_id:<id>"`), and
  `return_token_ids: true` (newer versions also return `token_ids` and `prompt_token_ids`, checked when present).
  Start the server with `--logprobs-mode processed_logprobs`: the default (`raw_logprobs`) reports logprobs
  before temperature, not those of the distribution sampled from.
- Weights: LoRA adapters only over HTTP (`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`, `--enable-lora`):
  `POST /v1/load_lora_adapter {lora_name, lora_path}`, requests then name the adapter as their `model`, and the
  previous one is unloaded with `POST /v1/unload_lora_adapter {lora_name}`. vLLM has no HTTP endpoint that
  reloads full weights, so full fine-tuning needs SGLang (or `transformers serve`).

SGLang (native API, https://docs.sglang.io: "SGLang Native APIs", "Sampling Parameters"):
- `POST /generate` with `input_ids`, `sampling_params` and `return_logprob: true`; the reply's
  `meta_info.output_token_logprobs` is a list of `[logprob, token_id, text]`, `meta_info.finish_reason.type`
  is `stop` or `length`, and `output_ids` (when present) must agree.
- Weights: full weights from a folder, `POST /update_weights_from_disk {model_path}` -> `{success, message}`
  (LoRA adapters are merged into the saved weights first).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from envgym.llm.local import TokenSample
from envgym.train.generation import CachedSampler
from envgym.train.server_sampler import (
    KINDS,
    ServerSampler,
    ServerSamplerError,
    TransformersServeSampler,
    row_seed,
    save_full_model,
)


class _ConcurrentRows(ServerSampler):
    """Engines seed each request on its own, so the rows of a call go out concurrently and stay reproducible."""

    def _sample_rows(
        self, prompts: list[list[int]], max_new_tokens: int, temperature: float, seed: int | None
    ) -> list[TokenSample]:
        with ThreadPoolExecutor(max_workers=min(len(prompts), 32) or 1) as pool:
            futures = [pool.submit(self._sample_one, prompt, max_new_tokens, temperature, row_seed(seed, row))
                       for row, prompt in enumerate(prompts)]
            return [future.result() for future in futures]

    def _sample_one(self, prompt: list[int], max_new_tokens: int, temperature: float,
                    seed: int | None) -> TokenSample:
        raise NotImplementedError

    def _sample(self, ids: list[int], logprobs: list[float]) -> TokenSample:
        if len(ids) != len(logprobs):
            raise ServerSamplerError(f"{self.kind} server at {self.base_url}: {len(ids)} token ids but "
                                     f"{len(logprobs)} logprobs")
        return TokenSample(ids, logprobs, bool(ids) and ids[-1] in self.eos_token_ids)


def _token_id(token: Any, where: str) -> int:
    text = str(token)
    if not text.startswith("token_id:"):
        raise ServerSamplerError(f"{where}: token {text!r} is not 'token_id:<id>' (is return_tokens_as_token_ids "
                                 "supported by this vLLM?)")
    return int(text[len("token_id:"):])


class VLLMSampler(_ConcurrentRows):
    """vLLM's `/v1/completions` with token-id prompts; LoRA adapters pushed with `/v1/load_lora_adapter`."""

    kind = "vllm"

    def _push(self, model: Any, version: int) -> None:
        if not hasattr(model, "peft_config"):
            raise ServerSamplerError(
                f"vllm server at {self.base_url}: vLLM takes new weights over HTTP only as LoRA adapters "
                "(/v1/load_lora_adapter); train with use_lora: true, or serve with SGLang or transformers serve")
        folder = self._new_folder(version)
        model.save_pretrained(str(folder))
        name = f"{self.push_root.name}-v{version}"
        self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(folder)})
        previous, self.model_name = self.model_name, name
        if previous is not None and previous.startswith(self.push_root.name) and previous != name:
            self._post("/v1/unload_lora_adapter", {"lora_name": previous})

    def _sample_one(self, prompt: list[int], max_new_tokens: int, temperature: float,
                    seed: int | None) -> TokenSample:
        body: dict[str, Any] = {
            "model": self.model_name, "prompt": prompt, "max_tokens": max_new_tokens, "temperature": temperature,
            "top_p": 1.0, "top_k": -1, "logprobs": 0, "return_tokens_as_token_ids": True,
            "return_token_ids": True, "skip_special_tokens": False,
        }
        if seed is not None:
            body["seed"] = seed
        where = f"vllm server at {self.base_url}/v1/completions"
        reply = self._post("/v1/completions", body)
        try:
            choice = reply["choices"][0]
            logprobs = choice["logprobs"]
            ids = [_token_id(token, where) for token in logprobs["tokens"]]
            values = [float(x) for x in logprobs["token_logprobs"]]
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise ServerSamplerError(f"{where}: no token logprobs in the reply ({error!r}): "
                                     f"{str(reply)[:300]}") from error
        if choice.get("token_ids") is not None and list(choice["token_ids"]) != ids:
            raise ServerSamplerError(f"{where}: token_ids {choice['token_ids']} disagree with the logprob tokens {ids}")
        served_prompt = choice.get("prompt_token_ids") or reply.get("prompt_token_ids")
        if served_prompt is not None and list(served_prompt) != prompt:
            raise ServerSamplerError(f"{where}: the server prompted with other token ids than the ones sent")
        return self._sample(ids, values)


class SGLangSampler(_ConcurrentRows):
    """SGLang's native `/generate` with `input_ids`; full weights pushed with `/update_weights_from_disk`."""

    kind = "sglang"

    def _push(self, model: Any, version: int) -> None:
        folder = self._new_folder(version)
        save_full_model(model, self.tokenizer, folder)
        reply = self._post("/update_weights_from_disk", {"model_path": str(folder)})
        if not isinstance(reply, dict) or reply.get("success") is not True:
            raise ServerSamplerError(f"sglang server at {self.base_url}/update_weights_from_disk did not load "
                                     f"{folder}: {str(reply)[:300]}")
        self.model_name = str(folder)

    def _sample_one(self, prompt: list[int], max_new_tokens: int, temperature: float,
                    seed: int | None) -> TokenSample:
        params: dict[str, Any] = {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": 1.0,
                                  "top_k": -1, "skip_special_tokens": False}
        if seed is not None:
            params["sampling_seed"] = seed
        where = f"sglang server at {self.base_url}/generate"
        reply = self._post("/generate", {"input_ids": prompt, "sampling_params": params, "return_logprob": True})
        try:
            pairs = reply["meta_info"]["output_token_logprobs"]
            ids = [int(item[1]) for item in pairs]
            values = [float(item[0]) for item in pairs]
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise ServerSamplerError(f"{where}: no output_token_logprobs in the reply ({error!r}): "
                                     f"{str(reply)[:300]}") from error
        if reply.get("output_ids") is not None and list(reply["output_ids"]) != ids:
            raise ServerSamplerError(f"{where}: output_ids {reply['output_ids']} disagree with the logprob tokens {ids}")
        return self._sample(ids, values)


def build_server_sampler(
    kind: str, base_url: str, tokenizer: Any, *, push_dir: str | Path, model_name: str | None = None
) -> ServerSampler:
    """The sampler for a server of `kind` (one of `KINDS`) at `base_url`."""
    classes: dict[str, type[ServerSampler]] = {
        "transformers": TransformersServeSampler, "vllm": VLLMSampler, "sglang": SGLangSampler}
    if kind not in classes:
        raise ValueError(f"server kind {kind!r}: expected one of {', '.join(KINDS)}")
    return classes[kind](base_url, tokenizer, push_dir=push_dir, model_name=model_name)


def make_sampler(config: Any, model: Any, tokenizer: Any) -> Any:
    """The sampler a `GRPOConfig` asks for: `CachedSampler` in-process, or a `ServerSampler` (pushed lazily)."""
    if config.generation == "local":
        return CachedSampler(model, tokenizer, config.sampler_dtype)
    from envgym.train import distributed

    url = server_for_rank(str(config.server_url), config.server_kind, distributed.rank(), distributed.world_size())
    push_dir = config.server_push_dir or str(Path(config.output_dir) / "pushed")
    return build_server_sampler(config.server_kind, url, tokenizer, push_dir=push_dir)


def server_for_rank(server_url: str, kind: str, rank: int, world_size: int) -> str:
    """The server rank `rank` samples from: `server_url` lists one or more (comma-separated), rank r takes entry
    r mod n. Every rank pushes its own copy of the weights (the same after each all-reduce) into its own folder or
    adapter name, so ranks may share a transformers or vLLM server; SGLang's push replaces the weights of the whole
    server, under the other ranks' requests, so there each rank needs a server of its own."""
    urls = [u.strip() for u in server_url.split(",") if u.strip()]
    if not urls:
        raise ValueError(f"server_url {server_url!r} names no server")
    if kind == "sglang" and world_size > len(urls):
        raise ValueError(f"sglang: {world_size} ranks share {len(urls)} server(s), and a push reloads a whole SGLang "
                         "server under the other ranks' requests; give server_url one URL per rank")
    return urls[rank % len(urls)]
