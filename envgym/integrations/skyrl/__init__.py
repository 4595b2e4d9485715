"""envgym worlds in SkyRL-gym (`skyrl_gym`, the SkyRL trainer's env API): `register_worlds()` registers every
registered envgym environment in `skyrl_gym`'s registry as `envgym-<name>`, a `BaseTextEnv` with SkyRL's
`init(prompt) -> (conversation, metadata)` and `step(text) -> BaseTextEnvStepOutput`.

    import skyrl_gym
    from envgym.integrations.skyrl import register_worlds

    register_worlds()
    env = skyrl_gym.make("envgym-retail", env_config={"max_steps": 10}, extras={"task_id": "return_W0049", "seed": 0})
    conversation, metadata = env.init([])

`dataset_rows(name)` gives SkyRL dataset rows (prompt, env_class, extras) for a world's tasks.
"""

from __future__ import annotations

from envgym.integrations.skyrl.env import EnvgymTextEnv, dataset_rows, register_worlds

__all__ = ["EnvgymTextEnv", "dataset_rows", "register_worlds"]
