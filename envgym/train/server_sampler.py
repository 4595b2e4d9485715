"""Rollout generation on an inference server, behind the sampler interface, with the policy's weights pushed to it.

A `ServerSampler` has `CachedSampler`'s signature (token ids in, `TokenSample`s out) but sends each prompt to a
server, one request per row with its own seed, and `push_weights(model, version)` makes the server sample from
the policy's current weights: the trainer pushes before the first rollout and after every update, so the server
is never a version behind. Weights travel through a folder both the trainer and the server can read
(`push_dir`): each push writes a new subfolder, never an old path again (servers cache models by path).

Three wire formats (`KINDS`):
- `transformers`: `transformers serve` (transformers' own OpenAI-compatible server; runs on CPU, tested for
  real). Its `/v1/completions` takes text and returns text only: no token ids, no logprobs. The prompt ids are
  decoded to text, the reply text is re-tokenized, and the logprobs are recomputed by the local policy (the
  weights just pushed, so the distribution the server sampled from). A turn is *verified* only when that
  reconstruction is exact as far as the server lets us check: the prompt text tokenizes back to the prompt ids
  and the server counted as many prompt tokens, the reply re-tokenizes to ids that decode back to it, and the
  server's completion token count equals ours. The count catches special tokens the server dropped from the
  text and most non-canonical tokenizations; a different tokenization of the same length would pass, so this
  guarantee is weaker than the engines'. An unverified turn is returned with `verified=False`: the rollout
  keeps it as context with mask 0 and never trains on it. Weights are pushed as a
  full model folder and loaded with `POST /load_model`; requests then name that folder. The server must run
  without a pinned model (no positional model argument), or it refuses every other model name.
- `vllm` and `sglang`: see `envgym.train.server_engines` (exact token ids and logprobs from the server).

Sampling is full-vocabulary `softmax(logits / temperature)` (top_k and top_p off), greedy at temperature 0,
matching `CachedSampler` and the loss.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import httpx
import torch

from envgym.llm.local import TokenSample
from envgym.train.generation import causal_lm

KINDS = ("transformers", "vllm", "sglang")


class ServerSamplerError(RuntimeError):
    """The inference server refused a request or answered something the sampler cannot use; the message names
    the URL, the status and what was wrong."""


def row_seed(seed: int | None, row: int) -> int | None:
    """Each row of a call gets its own seed: a GRPO group sends the same prompt G times."""
    return None if seed is None else seed * 1_000_003 + row


def policy_logprobs(model: Any, prompt: list[int], completion: list[int], temperature: float) -> list[float]:
    """`log_softmax(logits / temperature)` of each completion token after `prompt` (plain logits at 0)."""
    if not completion:
        return []
    lm = causal_lm(model)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            ids = torch.tensor([prompt + completion[:-1]])
            logits = lm(input_ids=ids, logits_to_keep=len(completion)).logits[0].float()
    finally:
        model.train(was_training)
    if temperature > 0:
        logits = logits / temperature
    picked = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(completion).unsqueeze(1)).squeeze(1)
    return [float(x) for x in picked]


def _saveable(lm: Any) -> Any:
    """`lm`, or a view of its weights in the plain class when transformers flags it as quantized: a GGUF-loaded
    policy (the default 'local' SmolLM2) holds plain float tensors, but `save_pretrained` refuses it."""
    if getattr(lm, "hf_quantizer", None) is None:
        return lm
    config = lm.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_name_or_path", None)
    with torch.device("meta"):
        plain = type(lm)(type(lm.config).from_dict(config))
    plain.load_state_dict(lm.state_dict(), assign=True)  # the same tensors, nothing copied
    plain.generation_config = lm.generation_config
    return plain


def save_full_model(model: Any, tokenizer: Any, folder: Path) -> None:
    """A transformers folder of `model` with LoRA adapters merged in (the policy as it samples), written by whichever
    rank calls it: under torch.distributed `save_pretrained` writes the weights and config on rank 0 only (and
    the tokenizer on every rank), but every rank pushes its own copy to its own server."""
    lm = _saveable(copy.deepcopy(model).merge_and_unload() if hasattr(model, "merge_and_unload") else model)
    lm.should_save_on_this_rank = lambda is_main_process: is_main_process  # this rank, whatever its number
    try:
        lm.save_pretrained(str(folder))
    finally:
        del lm.should_save_on_this_rank
    tokenizer.save_pretrained(str(folder))


class ServerSampler:
    """The shared half of every server backend: the HTTP client, the push folder, the version served."""

    kind = ""

    def __init__(
        self,
        base_url: str,
        tokenizer: Any,
        *,
        push_dir: str | Path,
        model_name: str | None = None,
        timeout_s: float = 600.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token_id
        self.eos_token_ids: set[int] = set(eos if isinstance(eos, list) else [eos])
        self.pad_token_id: int = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(
            self.eos_token_ids)
        self.model_name = model_name
        Path(push_dir).mkdir(parents=True, exist_ok=True)
        # A fresh folder per sampler: a long-lived server caches what it loaded by path.
        self.push_root = Path(tempfile.mkdtemp(prefix="envgym-push-", dir=str(push_dir))).resolve()
        self.version: int | None = None
        self.policy: Any = None
        self._client = client or httpx.Client(timeout=timeout_s)
        self.stats = {"requests": 0, "pushes": 0, "unverified": 0}

    def close(self) -> None:
        self._client.close()

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        """POST JSON and return the JSON reply (or its text when it is not JSON); errors name URL and status."""
        url = f"{self.base_url}{path}"
        try:
            response = self._client.post(url, json=body)
        except httpx.HTTPError as error:
            raise ServerSamplerError(f"{self.kind} server at {url}: {type(error).__name__}: {error}") from error
        if response.status_code >= 400:
            raise ServerSamplerError(f"{self.kind} server at {url} answered {response.status_code}: "
                                     f"{response.text[:500]}")
        try:
            return response.json()
        except ValueError:
            return response.text

    def _new_folder(self, version: int) -> Path:
        folder = self.push_root / f"v{version}"
        if folder.exists():
            shutil.rmtree(folder)
        return folder

    def push_weights(self, model: Any, version: int) -> None:
        """Make the server sample from `model`'s current weights, tagged `version`."""
        self._push(model, version)
        self.policy, self.version = model, version
        self.stats["pushes"] += 1

    def _push(self, model: Any, version: int) -> None:
        raise NotImplementedError

    def sample(
        self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float, seed: int | None = None
    ) -> list[TokenSample]:
        """One continuation per prompt, from the weights of the last push."""
        if self.version is None:
            raise ServerSamplerError(f"{self.kind} server at {self.base_url}: push_weights(model, version) before "
                                     "sampling, so the server samples from the policy's weights")
        if any(not p for p in prompts):
            raise ValueError("ServerSampler.sample: every prompt needs at least one token")
        samples = self._sample_rows(prompts, max_new_tokens, temperature, seed)
        self.stats["requests"] += len(prompts)
        self.stats["unverified"] += sum(not s.verified for s in samples)
        return samples

    def _sample_rows(
        self, prompts: list[list[int]], max_new_tokens: int, temperature: float, seed: int | None
    ) -> list[TokenSample]:
        raise NotImplementedError


class TransformersServeSampler(ServerSampler):
    """`transformers serve`: text in, text out; ids re-tokenized and checked, logprobs from the local policy."""

    kind = "transformers"

    def _push(self, model: Any, version: int) -> None:
        folder = self._new_folder(version)
        save_full_model(model, self.tokenizer, folder)
        events = self._load(str(folder))
        if not events or events[-1].get("status") != "ready":
            raise ServerSamplerError(f"transformers server at {self.base_url}/load_model did not load {folder}: "
                                     f"{events[-1] if events else 'no reply'}")
        previous, self.model_name = self.model_name, str(folder)
        if previous is not None and Path(previous).parent == self.push_root and previous != self.model_name:
            shutil.rmtree(previous, ignore_errors=True)  # the server holds it in memory until its idle timeout

    def _load(self, folder: str) -> list[dict[str, Any]]:
        """`POST /load_model` streams server-sent events until the model is ready (or failed)."""
        reply = self._post("/load_model", {"model": folder})
        text = reply if isinstance(reply, str) else json.dumps(reply)
        return [json.loads(line[len("data:"):]) for line in text.splitlines() if line.startswith("data:")]

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _sample_rows(
        self, prompts: list[list[int]], max_new_tokens: int, temperature: float, seed: int | None
    ) -> list[TokenSample]:
        # One request at a time: the server seeds its global torch RNG per request, so concurrent requests
        # would draw from each other's streams and the run would not be reproducible.
        return [self._sample_one(prompt, max_new_tokens, temperature, row_seed(seed, row))
                for row, prompt in enumerate(prompts)]

    def _sample_one(self, prompt: list[int], max_new_tokens: int, temperature: float,
                    seed: int | None) -> TokenSample:
        text = self.tokenizer.decode(prompt, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        generation: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": temperature > 0,
                                      "eos_token_id": sorted(self.eos_token_ids), "pad_token_id": self.pad_token_id}
        if temperature > 0:
            generation.update(temperature=temperature, top_k=0, top_p=1.0)
        body: dict[str, Any] = {"model": self.model_name, "prompt": text, "generation_config": json.dumps(generation)}
        if seed is not None:
            body["seed"] = seed
        reply = self._post("/v1/completions", body)
        try:
            choice, usage = reply["choices"][0], reply["usage"]
            reply_text, reason = str(choice["text"]), choice["finish_reason"]
            served_prompt, served_completion = int(usage["prompt_tokens"]), int(usage["completion_tokens"])
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise ServerSamplerError(f"transformers server at {self.base_url}/v1/completions: not a completion "
                                     f"({error!r}): {str(reply)[:300]}") from error
        ids = self._encode(reply_text)
        ended = reason == "stop" and len(ids) < max_new_tokens
        if ended:
            ids.append(min(self.eos_token_ids))
        round_trip = self.tokenizer.decode(ids[:-1] if ended else ids, skip_special_tokens=False,
                                           clean_up_tokenization_spaces=False)
        verified = (self._encode(text) == prompt and served_prompt == len(prompt) and round_trip == reply_text
                    and served_completion == len(ids) and (not ended or len(self.eos_token_ids) == 1))
        logprobs = policy_logprobs(self.policy, prompt, ids, temperature)
        return TokenSample(ids, logprobs, ended, verified=verified)
