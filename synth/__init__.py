"""The envgym synthesizer (K2-style, v2): world grammar -> evolved tools -> task programs -> verified tasks -> envs.

Domains are data models grown from the taxonomy by structural operators (synth.stages.domains); tools are derived
from them by operators and evolved by mutations (synth.operators, synth.mutations), then executed and checked;
tasks are typed programs (synth.program, synth.segments) solved on the world and kept only when the oracle and a
fair planner pass and every negative control fails (synth.stages.verify, synth.planner, envgym.play.controls). Stage
outputs are content-addressed, resumable JSONL under `<out>/_synth/` (synth.store, synth.seeds); `synth.pipeline`
orchestrates and `synth.materialize` writes the environment folders.
"""

from synth.pipeline import SynthConfig, run_pipeline

__all__ = ["SynthConfig", "run_pipeline"]
