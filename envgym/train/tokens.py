"""Token-in/token-out trajectories: the sampler's exact ids and logprobs, env tokens appended with mask 0.

Env, tool and user messages are tokenized by rendering the conversation with the chat template with them
and appending what the render adds after the sample's tokens:
1. when the sample's tokens are a prefix of the new render's tokens (the extension property), the
   render's remaining tokens;
2. otherwise, when the sample's tokens *decode* to a prefix of the new render's text (the model sampled a
   non-canonical tokenization of its own text, or a turn cut at the token cap), the remaining text
   tokenized on its own: the sampled ids stay exactly as sampled and the sampler is prompted with these
   very tokens next turn, so what is trained is what was sampled;
3. only when neither holds (the template rewrites history, e.g. drops earlier reasoning) is the current
   sample closed and a new one started from the full re-rendered conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envgym.llm.chat_template import render_chat


@dataclass
class TokenSample:
    """One training sequence. `mask[t] == 1` iff token t was sampled by the policy; `logprobs[t]` is its
    behaviour log-probability there and 0.0 elsewhere; `policy_version` is the version of the weights that
    sampled it (the learner refuses a sample older than its staleness bound)."""

    token_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    policy_version: int = 0

    def extend(self, ids: list[int], mask: int, logprobs: list[float] | None = None) -> None:
        self.token_ids.extend(ids)
        self.mask.extend([mask] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    @property
    def trainable_tokens(self) -> int:
        return sum(self.mask)


class TrajectoryTokens:
    """Builds the token samples of one episode turn by turn.

    `messages` is the conversation as the policy produced it: assistant turns hold the raw sampled text,
    so re-rendering reproduces the sampled tokens.
    """

    def __init__(
        self, tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> None:
        self.tokenizer = tokenizer
        self.tools = tools
        self.messages = [dict(m) for m in messages]
        self.samples: list[TokenSample] = []
        self.prefix_mismatches = 0
        self.noncanonical_joins = 0
        self._start_sample()

    @property
    def current(self) -> TokenSample:
        return self.samples[-1]

    def _render(self) -> str:
        return render_chat(self.tokenizer, self.messages, self.tools, add_generation_prompt=True)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _start_sample(self) -> None:
        sample = TokenSample()
        sample.extend(self._encode(self._render()), 0)
        self.samples.append(sample)

    def add_completion(self, token_ids: list[int], logprobs: list[float], text: str, trainable: bool = True) -> None:
        """Append sampled ids (mask 1) and record the assistant turn as `text` (their decoding).

        `trainable=False` (ids a backend could not confirm were the ones sampled) appends them with mask 0:
        context for what follows, never learned from.
        """
        if len(token_ids) != len(logprobs):
            raise ValueError(f"add_completion: {len(token_ids)} token ids but {len(logprobs)} logprobs")
        if trainable:
            self.current.extend(list(token_ids), 1, list(logprobs))
        else:
            self.current.extend(list(token_ids), 0)
        self.messages.append({"role": "assistant", "content": text})

    def add_messages(self, new_messages: list[dict[str, Any]]) -> bool:
        """Append env/tool/user messages (mask 0) up to the next generation prompt.

        Returns False when neither the token nor the text prefix check held and a new sample was started
        (see the module docstring).
        """
        self.messages.extend(dict(m) for m in new_messages)
        text = self._render()
        rendered = self._encode(text)
        current = self.current.token_ids
        if rendered[: len(current)] == current:
            self.current.extend(rendered[len(current) :], 0)
            return True
        decoded = self.tokenizer.decode(current, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if text.startswith(decoded):
            self.noncanonical_joins += 1
            self.current.extend(self._encode(text[len(decoded) :]), 0)
            return True
        self.prefix_mismatches += 1
        self._start_sample()
        return False

    def trainable_samples(self) -> list[TokenSample]:
        """Samples holding at least one policy token (a sample opened just before the end has none), each
        without the env tokens after its last policy token: nothing is learned from them."""
        kept = []
        for sample in self.samples:
            if sample.trainable_tokens == 0:
                continue
            end = max(t for t, bit in enumerate(sample.mask) if bit) + 1
            kept.append(TokenSample(sample.token_ids[:end], sample.mask[:end], sample.logprobs[:end]))
        return kept
