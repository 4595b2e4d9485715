"""The PCL curriculum: prompt features, a value head that learns success rates, and choices near 50%."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from envgym.train.curriculum import PromptCurriculum, prompt_features

SHARED = list(range(10, 40))  # a "system prompt" every prompt starts with
PROMPTS = {name: [*SHARED, *suffix] for name, suffix in
           (("task_0", [101, 102]), ("task_1", [111]), ("task_2", [121, 122, 123]),
            ("task_3", [131, 132]), ("task_4", [141]), ("task_5", [151, 152, 153, 154]))}
# task_0/1 never succeed, task_2/3 half the time, task_4/5 always.
SUCCESS = {"task_0": 0.0, "task_1": 0.0, "task_2": 0.5, "task_3": 0.5, "task_4": 1.0, "task_5": 1.0}


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _curriculum(model: LlamaForCausalLM, seed: int = 0, explore: float = 0.0) -> PromptCurriculum:
    return PromptCurriculum(model, lambda task: PROMPTS[task], hidden_size=32, candidates=6, explore=explore,
                            head_steps=40, head_lr=0.1, buffer_size=64, seed=seed)


def _outcomes(task: str, episodes: int = 4) -> list[bool]:
    wins = round(SUCCESS[task] * episodes)
    return [True] * wins + [False] * (episodes - wins)


def _train(curriculum: PromptCurriculum, rounds: int) -> list[float]:
    losses = []
    for step in range(rounds):
        chosen, _ = curriculum.choose(step, list(PROMPTS), len(PROMPTS))
        losses.append(curriculum.observe([(task, _outcomes(task)) for task in chosen])["pcl_value_loss"])
    return losses


def test_features_equal_each_prompt_run_alone(model: LlamaForCausalLM) -> None:
    prompts = list(PROMPTS.values())
    batched = prompt_features(model, prompts)
    with torch.no_grad():
        for row, prompt in enumerate(prompts):
            states = model.model(input_ids=torch.tensor([prompt])).last_hidden_state[0]
            alone = torch.cat([states[-1], states[len(SHARED):].mean(dim=0)])
            torch.testing.assert_close(batched[row], alone, rtol=1e-4, atol=1e-5)


def test_value_head_learns_success_rates_and_ranks_half_first(model: LlamaForCausalLM) -> None:
    curriculum = _curriculum(model)
    features = prompt_features(model, list(PROMPTS.values()))
    targets = torch.tensor([SUCCESS[t] for t in PROMPTS])
    weights = torch.ones(len(PROMPTS))
    curriculum.head.fit_standardization(features)
    with torch.no_grad():
        untrained = float(curriculum.loss(features, targets, weights))
    losses = _train(curriculum, rounds=3)
    assert losses[-1] < untrained - 0.1
    predicted = dict(zip(PROMPTS, curriculum.predict(features).tolist(), strict=True))
    for half in ("task_2", "task_3"):
        for extreme in ("task_0", "task_1", "task_4", "task_5"):
            assert abs(predicted[half] - 0.5) < abs(predicted[extreme] - 0.5), predicted
    assert predicted["task_0"] < 0.25 and predicted["task_5"] > 0.75


def test_choice_fills_the_batch_with_prompts_near_half(model: LlamaForCausalLM) -> None:
    curriculum = _curriculum(model)
    _train(curriculum, rounds=3)
    chosen, stats = curriculum.choose(3, ["task_0", "task_4", "task_2", "task_5", "task_3", "task_1"], 2)
    assert sorted(chosen) == ["task_2", "task_3"]
    assert stats["pcl_explored"] == 0.0 and abs(stats["pcl_predicted_mean"] - 0.5) < 0.2


def test_exploration_tries_unseen_prompts_first(model: LlamaForCausalLM) -> None:
    curriculum = _curriculum(model, explore=1.0)
    chosen, _ = curriculum.choose(0, ["task_0", "task_2"], 2)
    curriculum.observe([(task, _outcomes(task)) for task in chosen])
    for step in range(1, 4):
        picked, stats = curriculum.choose(step, ["task_0", "task_2", "task_4"], 1)
        assert picked == ["task_4"] and stats["pcl_explored"] == 1.0
        curriculum._pending.clear()


def test_choices_and_head_are_deterministic_by_seed(model: LlamaForCausalLM) -> None:
    def run(seed: int) -> tuple[list[list[str]], dict[str, torch.Tensor]]:
        curriculum = _curriculum(model, seed=seed, explore=0.5)
        picks = []
        for step in range(3):
            chosen, _ = curriculum.choose(step, list(PROMPTS), 3)
            curriculum.observe([(task, _outcomes(task)) for task in chosen])
            picks.append(chosen)
        return picks, curriculum.head.state_dict()

    first, second = run(7), run(7)
    assert first[0] == second[0]
    for name, tensor in first[1].items():
        assert torch.equal(tensor, second[1][name]), name


def test_state_dict_round_trip_restores_head_buffer_and_seen(model: LlamaForCausalLM) -> None:
    trained = _curriculum(model)
    _train(trained, rounds=2)
    fresh = _curriculum(model, seed=5)
    fresh.load_state_dict(trained.state_dict())
    features = prompt_features(model, list(PROMPTS.values()))
    assert torch.equal(fresh.predict(features), trained.predict(features))
    assert [(o.task_id, o.success_rate) for o in fresh.buffer] == [(o.task_id, o.success_rate) for o in trained.buffer]
    assert fresh.seen == trained.seen


def test_too_few_candidates_is_a_clear_error(model: LlamaForCausalLM) -> None:
    with pytest.raises(ValueError, match="1 candidates for 2 tasks"):
        _curriculum(model).choose(0, ["task_0"], 2)
    with pytest.raises(ValueError, match="1 training tasks cannot fill 2"):
        _curriculum(model).candidates_for(0, lambda index: "task_0", 2, 1)
