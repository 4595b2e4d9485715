"""Rollouts with a real (tiny, random) policy on envgym/calculator-v0: token caps and cached generation."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
import torch

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.llm.chat_template import encode_chat
from envgym.llm.local import TransformersSampler
from envgym.train.generation import CachedSampler, _common_prefix
from envgym.train.policy import tiny_random_policy
from envgym.train.rollout import RolloutLimits, run_group, run_groups

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def policy() -> tuple[Any, Any]:
    return tiny_random_policy(seed=11)


def test_no_sample_is_longer_than_max_sequence_tokens(policy: tuple[Any, Any]) -> None:
    model, tokenizer = policy
    envs = [gym.make("envgym/calculator-v0") for _ in range(2)]
    _, info = envs[0].reset(seed=0, options={"task_id": "mul_000"})
    prompt = len(encode_chat(tokenizer, info["messages"], info["tools"], add_generation_prompt=True))
    # Room for one 12-token turn; the env's reply to it (a random model never calls the tool) does not fit.
    limits = RolloutLimits(max_new_tokens=12, max_sequence_tokens=prompt + 16, max_turns=3)
    episodes = run_group(envs, ["mul_000"] * 2, TransformersSampler(model, tokenizer), limits, temperature=1.0, seed=2)
    assert all(len(e.messages) > 3 for e in episodes)  # the env did answer after the cut
    lengths = [len(s.token_ids) for e in episodes for s in e.samples]
    assert lengths and max(lengths) <= limits.max_sequence_tokens
    assert all(e.truncated and e.reward == 0.0 for e in episodes)


def test_cached_generation_matches_uncached_generation_over_turns(policy: tuple[Any, Any]) -> None:
    model, tokenizer = policy
    plain = TransformersSampler(model, tokenizer)
    cached = CachedSampler(model, tokenizer)
    session = cached.session()
    opening = tokenizer("<|im_start|>system\nUse the calculator.<|im_end|>\n<|im_start|>user\nWhat is 3 * 4?"
                        "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    prompts = [opening, [*opening, 28, 29], opening[:-2]]  # one shares less of the prompt than the others
    env = tokenizer("<|im_end|>\n<|im_start|>user\nGo on.<|im_end|>\n<|im_start|>assistant\n",
                    add_special_tokens=False)["input_ids"]
    prefilled = 0
    for _turn in range(2):
        before = cached.stats["prefill_tokens"]
        expected = plain.sample(prompts, max_new_tokens=6, temperature=0.0)
        got = session.sample(prompts, max_new_tokens=6, temperature=0.0)
        assert [s.token_ids for s in got] == [s.token_ids for s in expected]
        for mine, theirs in zip(got, expected, strict=True):
            assert max(abs(a - b) for a, b in zip(mine.logprobs, theirs.logprobs, strict=True)) < 1e-4
        prefilled = cached.stats["prefill_tokens"] - before
        prompts = [p + s.token_ids + env for p, s in zip(prompts, got, strict=True)]
    # Turn two prefilled only what each row had not fed yet: its last sampled token and the env tokens.
    assert prefilled == 3 * (1 + len(env))
    first = cached.session().sample(prompts, max_new_tokens=6, temperature=1.0, seed=5)
    again = cached.session().sample(prompts, max_new_tokens=6, temperature=1.0, seed=5)
    assert [s.token_ids for s in first] == [s.token_ids for s in again]


def test_rows_with_uneven_new_tokens_are_prefilled_alone_and_sample_what_a_batch_would(
    policy: tuple[Any, Any],
) -> None:
    """A turn where one row's env reply is long and the others' short (a tool result beside user replies): the
    long row is prefilled alone instead of padding every row to it, and every row samples what it would have."""
    model, tokenizer = policy
    plain, cached = TransformersSampler(model, tokenizer), CachedSampler(model, tokenizer)
    session = cached.session()
    opening = tokenizer("<|im_start|>system\nUse the calculator.<|im_end|>\n<|im_start|>user\nWhat is 3 * 4?"
                        "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    prompts = [opening] * 4
    first = session.sample(prompts, max_new_tokens=5, temperature=0.0)
    assert cached.stats["rows_prefilled_alone"] == 0  # one prompt, shared: nothing to pad
    replies = ["<|im_start|>tool\n" + "12, " * 40, "<|im_start|>user\nOk.", "<|im_start|>user\nGo on.",
               "<|im_start|>user\nYes, please."]
    env = [tokenizer(f"<|im_end|>\n{reply}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
           ["input_ids"] for reply in replies]
    prompts = [p + s.token_ids + e for p, s, e in zip(prompts, first, env, strict=True)]
    before = cached.stats["prefill_tokens"]
    got = session.sample(prompts, max_new_tokens=6, temperature=0.0)
    expected = plain.sample(prompts, max_new_tokens=6, temperature=0.0)
    assert len(env[0]) > 3 * max(len(e) for e in env[1:])
    assert cached.stats["rows_prefilled_alone"] == 4
    # Each row's new tokens (its last sampled token and the env's reply) prefilled once, no padding; rows prefilled
    # alone also reuse what an earlier row of the call shares with them (the four first answers are one greedy one).
    assert len({tuple(s.token_ids) for s in first}) == 1
    shared = [0] + [1 + max(_common_prefix(env[j], env[i]) for j in range(i)) for i in range(1, 4)]
    assert cached.stats["prefill_tokens"] - before == sum(1 + len(e) - k for e, k in zip(env, shared, strict=True))
    assert [s.token_ids for s in got] == [s.token_ids for s in expected]
    for mine, theirs in zip(got, expected, strict=True):
        assert max(abs(a - b) for a, b in zip(mine.logprobs, theirs.logprobs, strict=True)) < 1e-4


def test_run_groups_batches_every_groups_turn_and_keeps_each_groups_seeds(policy: tuple[Any, Any]) -> None:
    model, tokenizer = policy
    sampler = CachedSampler(model, tokenizer)
    batch_sizes: list[int] = []
    open_session = sampler.session

    def recording_session() -> Any:  # the real session; only the batch size of each call is noted
        session = open_session()
        sample = session.sample
        session.sample = lambda prompts, **kw: (batch_sizes.append(len(prompts)), sample(prompts, **kw))[1]
        return session

    sampler.session = recording_session  # type: ignore[method-assign]
    envs = [gym.make("envgym/calculator-v0") for _ in range(6)]
    limits = RolloutLimits(max_new_tokens=8, max_sequence_tokens=512, max_turns=2)
    tasks = ["mul_000", "mul_001", "mul_002"]
    groups = run_groups(envs, tasks, [10, 20, 30], sampler, limits, temperature=1.0, policy_version=3)
    assert [[e.task_id for e in g.episodes] for g in groups] == [[t, t] for t in tasks]
    assert [g.task_id for g in groups] == tasks and all(g.policy_version == 3 for g in groups)
    assert [[e.seed for e in g.episodes] for g in groups] == [[10, 11], [20, 21], [30, 31]]
    first_user = [[e.messages[1]["content"] for e in g.episodes] for g in groups]
    assert all(len(set(texts)) == 1 for texts in first_user) and len({t[0] for t in first_user}) == 3
    assert batch_sizes[0] == 6  # the first turn of all three groups is one generation
    # One group alone is exactly run_group with that group's seed.
    alone = run_groups(envs[:2], ["mul_001"], [20], sampler, limits, temperature=1.0)[0].episodes
    direct = run_group(envs[:2], ["mul_001"] * 2, sampler, limits, temperature=1.0, seed=20)
    assert [[s.token_ids for s in e.samples] for e in alone] == [[s.token_ids for s in e.samples] for e in direct]
    with pytest.raises(ValueError, match="run_groups: 5 envs, 3 tasks"):
        run_groups(envs[:5], tasks, [10, 20, 30], sampler, limits, temperature=1.0)


def test_a_bfloat16_sampler_reports_the_bfloat16_distribution_it_samples_from(policy: tuple[Any, Any]) -> None:
    """`GRPOConfig.sampler_dtype="bfloat16"`: the sampler's forwards run under autocast, and the logprobs it reports
    are those of that distribution (a whole-sequence forward under the same autocast), not float32's."""
    model, tokenizer = policy
    prompt = tokenizer("<|im_start|>user\nWhat is 3 * 4?<|im_end|>\n<|im_start|>assistant\n",
                       add_special_tokens=False)["input_ids"]
    (sample,) = CachedSampler(model, tokenizer, "bfloat16").sample([prompt], max_new_tokens=8, temperature=1.0, seed=3)
    ids = torch.tensor([prompt + sample.token_ids])
    scored = slice(len(prompt) - 1, ids.shape[1] - 1)
    reported = torch.tensor(sample.logprobs)

    def whole(autocast: bool) -> torch.Tensor:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=ids).logits[0, scored].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:][scored].unsqueeze(1)).squeeze(1)

    low, exact = (reported - whole(True)).abs().max(), (reported - whole(False)).abs().max()
    assert low < exact, (low, exact)
    assert exact > 1e-4  # the sampler really ran in bfloat16


def test_a_bfloat16_samplers_cache_holds_bfloat16_and_samples_what_a_float32_cache_did(
        policy: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Under autocast the rotated keys come out float32; the cache stores them (and the values) in bfloat16, the
    dtype attention cast them to at every step before: the same tokens and logprobs, bit for bit, over turns of a
    lockstep batch (a held prefix, rows prefilled alone, rows leaving the batch)."""
    model, tokenizer = policy
    opening = tokenizer("<|im_start|>system\n" + "Use the calculator, and show each step. " * 12 + "<|im_end|>\n"
                        "<|im_start|>user\nWhat is 3 * 4?<|im_end|>\n<|im_start|>assistant\n",
                        add_special_tokens=False)["input_ids"]
    env = tokenizer("<|im_end|>\n<|im_start|>user\nGo on.<|im_end|>\n<|im_start|>assistant\n",
                    add_special_tokens=False)["input_ids"]
    long_env = env + tokenizer(" and keep going" * 30, add_special_tokens=False)["input_ids"]

    def play(cache_dtype: bool) -> tuple[list[list[list[int]]], list[list[list[float]]], set[torch.dtype]]:
        sampler = CachedSampler(model, tokenizer, "bfloat16")
        made = sampler.new_cache
        dtypes: set[torch.dtype] = set()

        def new_cache(lm: Any, capacity: int, past: Any) -> Any:
            if not cache_dtype:  # the cache before: whatever dtype the states came in
                sampler.autocast = None
                cache = made(lm, capacity, past)
                sampler.autocast = torch.bfloat16
            else:
                cache = made(lm, capacity, past)
            original = cache.layers[0].update

            def update(key: torch.Tensor, value: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                out = original(key, value, *args, **kwargs)
                dtypes.update({out[0].dtype, out[1].dtype})
                return out
            cache.layers[0].update = update
            return cache

        monkeypatch.setattr(sampler, "new_cache", new_cache)
        session = sampler.session()
        prompts = [list(opening) for _ in range(4)]
        tokens, logprobs = [], []
        for turn in range(3):
            got = session.sample(prompts, max_new_tokens=5 + 3 * turn, temperature=1.0, seed=turn)
            tokens.append([s.token_ids for s in got])
            logprobs.append([s.logprobs for s in got])
            prompts = [p + s.token_ids + (long_env if row == 0 else env)
                       for row, (p, s) in enumerate(zip(prompts, got, strict=True))]
        assert sampler.stats["shared_prefix_rows"] > 0 and sampler.stats["rows_prefilled_alone"] > 0
        return tokens, logprobs, dtypes

    tokens, logprobs, dtypes = play(cache_dtype=True)
    before_tokens, before_logprobs, before_dtypes = play(cache_dtype=False)
    assert dtypes == {torch.bfloat16}
    assert torch.float32 in before_dtypes  # the keys did come out float32
    assert tokens == before_tokens
    assert logprobs == before_logprobs


def test_evaluations_of_a_bfloat16_sampler_run_in_float32(policy: tuple[Any, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`sampler_dtype` is the rollouts' precision: inside `float32()` the sampler samples what a float32 one does,
    bit for bit, and after it bfloat16 again; the recipe's evaluations run inside it."""
    from types import SimpleNamespace

    from envgym.train.generation import SamplerSession
    from envgym.train.recipe import evaluate_tasks

    model, tokenizer = policy
    prompts = [tokenizer("<|im_start|>user\nWhat is 3 * 4?<|im_end|>\n<|im_start|>assistant\n",
                         add_special_tokens=False)["input_ids"]] * 2
    low = CachedSampler(model, tokenizer, "bfloat16")

    def draw(sampler: CachedSampler) -> list[tuple[list[int], list[float]]]:
        return [(s.token_ids, s.logprobs) for s in sampler.sample(prompts, max_new_tokens=6, temperature=1.0, seed=5)]

    exact, rounded = draw(CachedSampler(model, tokenizer)), draw(low)
    assert exact != rounded
    with low.float32():
        assert draw(low) == exact
    assert draw(low) == rounded

    seen: list[Any] = []
    sample = SamplerSession.sample

    def spy(self: SamplerSession, *args: Any, **kwargs: Any) -> Any:
        seen.append(self.owner.autocast)
        return sample(self, *args, **kwargs)

    monkeypatch.setattr(SamplerSession, "sample", spy)
    envs = [gym.make("envgym/calculator-v0") for _ in range(2)]
    trainer = SimpleNamespace(sampler=low, limits=RolloutLimits(max_new_tokens=4, max_sequence_tokens=1024,
                                                                max_turns=1))
    assert len(evaluate_tasks(trainer, envs, ["mul_000", "mul_001", "mul_002"], seed=0)) == 3
    assert seen and set(seen) == {None} and low.autocast is torch.bfloat16


def test_an_unknown_sampler_dtype_is_refused_by_name(policy: tuple[Any, Any]) -> None:
    with pytest.raises(ValueError, match="float16"):
        CachedSampler(*policy, "float16")
