"""Loading the trainable policy (model + tokenizer) a `GRPOConfig.model` names."""

from __future__ import annotations

import copy
import os
from typing import Any

from envgym.llm.local import default_gguf_path, load_gguf_model, load_gguf_tokenizer


def tiny_random_policy(seed: int) -> tuple[Any, Any]:
    """A 2-layer, 64-wide Llama with random weights and SmolLM2's tokenizer: a real model for CI runs."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_gguf_tokenizer(str(default_gguf_path()))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model, tokenizer


def load_policy(spec: str, seed: int) -> tuple[Any, Any]:
    """(model, tokenizer) for 'local', 'local:<gguf>', 'tiny-random' or a transformers directory.

    The model is a private copy: training it never touches the per-process cache of `envgym.llm.local`.
    """
    if spec == "tiny-random":
        return tiny_random_policy(seed)
    kind, _, argument = spec.partition(":")
    if kind == "local":
        model, tokenizer = load_gguf_model(argument or str(default_gguf_path()))
        return copy.deepcopy(model), tokenizer
    if os.path.isdir(spec):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return AutoModelForCausalLM.from_pretrained(spec), AutoTokenizer.from_pretrained(spec)
    raise ValueError(
        f"GRPOConfig.model {spec!r}: expected 'local', 'local:<gguf path>', 'tiny-random' or a model directory"
    )
