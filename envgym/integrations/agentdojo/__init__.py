"""envgym's guard as a defense inside AgentDojo (the `agentdojo` package, benchmark v1.2.2), measured without a model.

`mapping` says what each AgentDojo tool is to the guard (labels, which arguments choose a recipient or target, which
results are third-party text); `pipeline` runs calls through the guard as an AgentDojo pipeline element and scripts
the two agents (ground truth, always-obey attacker); `evaluate` scores the suites; `report` writes Markdown and PNG.
`agentdojo` pins versions that conflict with envgym's (orjson), so it lives in its own venv
(~/.cache/envgym/agentdojo, made by `scripts/install.sh --dev`): run `python -m envgym.integrations.agentdojo` there.
"""
