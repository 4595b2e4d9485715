"""The harness half: the program that asks the model for each turn, run in-process (no uv script, no sandbox).

verifiers routes every model call of a rollout through its interception server (`endpoint`, bearer `secret`), which
records the turn on the trace and forwards it to the run's client; a harness may run its loop in-process as long as
its calls go there. This one makes one chat completion per segment: the conversation so far plus the env's tools.
"""

from __future__ import annotations

from typing import Any

import httpx
import verifiers.v1 as vf
from verifiers.v1.dialects.chat import message_to_wire

CONNECT_TIMEOUT_S = 30.0


class EnvgymHarnessConfig(vf.HarnessConfig):
    pass


class EnvgymHarness(vf.Harness[EnvgymHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True  # each segment relaunches on the whole conversation: the loop keeps no state
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages.extend(message_to_wire(m) for m in prompt or [])
        body: dict[str, Any] = {"model": ctx.model, "messages": messages}
        if tools := getattr(data, "tools", None):
            body["tools"] = tools
        url = f"{endpoint.rstrip('/')}/chat/completions"
        # No read timeout: a CPU model is slow, and the agent's rollout timeout is the backstop.
        async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)) as client:
            try:
                response = await client.post(url, json=body, headers={"Authorization": f"Bearer {secret}"})
            except httpx.TransportError as exc:
                return vf.ProgramResult(1, "", f"POST {url}: {type(exc).__name__}: {exc}")
        if response.status_code != 200:
            return vf.ProgramResult(1, "", f"POST {url}: HTTP {response.status_code}: {response.text[:2000]}")
        return vf.ProgramResult(0, response.text, "")
