"""SandboxSpec: the one place where a sandbox's image, limits, network and lifetime are declared."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_IMAGE = "envgym-sandbox:latest"
RESERVED_LABEL_PREFIXES = ("envgym.io/",)
"""Label keys a SandboxSpec may not set: the network policies select on them. (The reaper's `envgym.*` labels are
written by the backends after the spec's, so a spec's copy of one is overwritten, never used.)"""


class SandboxSpec(BaseModel):
    """What a backend must provide. Every backend maps these fields onto its own mechanism.

    Docker maps them to cgroup limits and a read-only root; Kubernetes to a pod spec; the local
    backend to rlimits on the commands it runs (where the kernel enforces them for the caller).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    image: str = DEFAULT_IMAGE
    cpu: float = Field(1.0, gt=0, description="CPU cores (fractional allowed).")
    memory_mb: int = Field(512, ge=16, description="Memory limit in MiB; swap is not granted on top.")
    pids: int = Field(256, ge=8, description="Maximum number of processes/threads in the sandbox.")
    disk_mb: int = Field(
        256,
        ge=1,
        description="Size of the writable workspace (and of /tmp) in MiB. The docker backend keeps both in "
        "memory (tmpfs): left unset, it sizes them to fit memory_mb; set, it must fit.",
    )
    network: Literal["none"] | list[str] = Field(
        "none",
        description='"none" (no network at all) or an egress allow-list of host names / IPs / CIDRs.',
    )
    ttl_s: float = Field(3600.0, gt=0, description="Hard lifetime: the server inside exits after it.")
    idle_s: float | None = Field(
        900.0, gt=0, description="The server exits after this long without a request."
    )
    timeout_s: float = Field(60.0, gt=0, description="Default per-command timeout.")
    max_output_bytes: int = Field(1 << 20, ge=1, description="Default cap on stdout and on stderr, each.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for commands.")
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels for the backend object; keys under envgym.io/ are reserved (the "
        "NetworkPolicies select on envgym.io/role and envgym.io/sandbox-client).",
    )

    @field_validator("labels")
    @classmethod
    def _no_reserved_labels(cls, value: dict[str, str]) -> dict[str, str]:
        reserved = sorted(k for k in value if k.startswith(RESERVED_LABEL_PREFIXES))
        if reserved:
            raise ValueError(
                f"labels: {', '.join(reserved)} reserved (keys under {' and '.join(RESERVED_LABEL_PREFIXES)} are "
                "envgym's own: a sandbox labelled envgym.io/role or envgym.io/sandbox-client would change which "
                "network policies apply to it)"
            )
        return value

    @field_validator("network")
    @classmethod
    def _allow_list_not_empty(cls, value: Literal["none"] | list[str]) -> Literal["none"] | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError('network: an empty allow-list means no network; write "none" instead')
        return value
