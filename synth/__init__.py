"""The envgym synthesizer (K2-style): taxonomy -> domains -> tools -> agents -> verified tasks -> environments.

Each stage is a module and a pure function of its inputs and the seed tree (`synth.seeds`); stage outputs are
content-addressed JSONL under `<out>/_synth/` and resumable (`synth.store`). `envgym synth run` drives them
(`synth.pipeline`); `harvest-mcp`, `rollouts`, `export`, `difficulty` and `stats` are the other entry points.
"""

from synth.pipeline import SynthConfig, run_pipeline

__all__ = ["SynthConfig", "run_pipeline"]
