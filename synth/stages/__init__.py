"""One module per synthesis stage: domains, worlds, tools, tasks, verify. Each is a pure function of its inputs and
the seed tree; `synth.pipeline` only orchestrates them and `synth.materialize` writes the results."""
