"""envgym environments as a `verifiers` (0.4, `verifiers.v1`) environment, run by verifiers' own `vf-eval`.

    vf-eval envgym-verifiers --env.taskset.env retail -n 2 -m MODEL --client.base-url URL --no-push

verifiers splits an environment into a taskset (`EnvgymTaskset`: the env's tasks, each opening with the env's system
prompt and the user's first message), an env that turns one task into one episode (`EnvgymEnv`: the envgym env is
stepped host-side, each model reply is one action, what the env answers is the next turn, and the reward recorded on
the trace is the env's rubric) and a harness, the program that calls the model (`EnvgymHarness`: one chat completion
per turn through verifiers' interception, in-process, with the env's tool schemas). The plugin id `envgym-verifiers`
is the top-level module `envgym_verifiers`, which exports the three (verifiers imports plugins by module name).

verifiers 0.4 pins `mcp==2.0.0` and `openai<3`, against ours: it lives in its own venv (`scripts/install.sh --dev`
makes ~/.cache/envgym/verifiers, pinned by constraints-verifiers.txt), and only that venv imports this package.
"""

from envgym.integrations.verifiers.env import EnvgymEnv, EnvgymEnvConfig
from envgym.integrations.verifiers.harness import EnvgymHarness, EnvgymHarnessConfig
from envgym.integrations.verifiers.taskset import EnvgymData, EnvgymTask, EnvgymTaskset, EnvgymTasksetConfig

__all__ = [
    "EnvgymData",
    "EnvgymEnv",
    "EnvgymEnvConfig",
    "EnvgymHarness",
    "EnvgymHarnessConfig",
    "EnvgymTask",
    "EnvgymTaskset",
    "EnvgymTasksetConfig",
]
