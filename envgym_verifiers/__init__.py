"""The `envgym-verifiers` plugin for verifiers (`vf-eval envgym-verifiers ...`): verifiers finds a taskset by module
name, so this top-level module exports what `envgym.integrations.verifiers` defines."""

from envgym.integrations.verifiers import EnvgymEnv, EnvgymHarness, EnvgymTaskset

__all__ = ["EnvgymEnv", "EnvgymHarness", "EnvgymTaskset"]
