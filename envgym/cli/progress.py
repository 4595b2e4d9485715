"""The CLI's progress bar over episodes (library code reports progress through callbacks only)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envgym.play.episode import Trajectory


@contextmanager
def episode_bar(description: str, total: int, *, enabled: bool = True) -> Iterator[Callable[[Trajectory], None]]:
    """A rich bar of `total` episodes showing the mean reward and successes; yields the `on_episode` callback."""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("mean reward {task.fields[mean]:.2f}, success {task.fields[ok]}"), TimeElapsedColumn())
    rewards: list[float] = []
    with Progress(*columns, disable=not enabled, transient=False) as bar:
        job = bar.add_task(description, total=total, mean=0.0, ok=0)

        def on_episode(trajectory: Trajectory) -> None:
            rewards.append(trajectory.reward)
            bar.update(job, advance=1, mean=sum(rewards) / len(rewards), ok=sum(r >= 1.0 for r in rewards))

        yield on_episode
