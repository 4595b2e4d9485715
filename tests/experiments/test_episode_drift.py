"""experiments/episode_drift.py: the per-step counts behind "the policy drifts to asking" (run as a script)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "episode_drift.py"


def episode(step: int, last: str, reward: float, reported: bool | None) -> dict[str, object]:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Your phone?"},
                {"role": "user", "content": "555-0100"}, {"role": "assistant", "content": last}]
    return {"step": step, "task_id": "t", "messages": messages, "reward": reward, "truncated": False,
            "training_reward": reward + 0.1, "answer_reported": reported}


def test_the_table_counts_questions_answers_and_reported_answers(tmp_path: Path) -> None:
    rows = [episode(0, "It is 159 liters.", 1.0, True), episode(0, "It is 982 liters.", 0.0, False),
            episode(0, "Could you tell me your plan?", 0.0, False), episode(1, "Tell me your plan.", 0.0, False)]
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--md", str(tmp_path / "t.md")],
                         capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    # step | episodes | successes | questions / episode | ended in an answer | reported an answer | truncated | ...
    assert lines[2].startswith("| 0 | 3 | 1 | 1.3 | 2 | 1 | 0 |")
    assert lines[3].startswith("| 1 | 1 | 0 | 1.0 | 1 | 0 | 0 |")
    assert (tmp_path / "t.md").read_text() == out
