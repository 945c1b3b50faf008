"""The job itself: its launch environment (envgen), the fixes for it (fix), one command per node
after a run (remote). The checkpoint tree's parser is Megatron knowledge: preflight.megatron."""
from __future__ import annotations

from types import ModuleType

# The checks the job's commands build on, by id (the one place outside checks/ that names them).
ENV_COMM, NET_PORTS, NPU_HEALTH, IB_LINK = "env.comm", "net.ports", "npu.health", "ib.link"


def check(check_id: str) -> ModuleType:
    """A check's module, reached as the runner reaches every check: through the registry, by id.
    job/ builds on env.comm's rules and facts, net.ports' port plan and npu.health's and ib.link's
    facts, and imports no check module (checks never import job/)."""
    from ..registry import discover

    return discover()[check_id].module
