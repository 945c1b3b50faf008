"""pytest fixtures for simulated clusters (loaded by tests/conftest.py via pytest_plugins).

They live with the tests, not in the package: nothing under preflight/ imports pytest.

Why a factory: bring-up costs ~0.1 s per node, so a module builds its cluster once and shares it;
the factory tears every cluster down at the end of the session even when tests fail, and
`requires_netns` skips (with the reason) where root or `ip netns` is missing.
"""
from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from preflight.sim import netns, sshd
from preflight.sim import slurm as sim_slurm
from preflight.sim.cluster import Cluster

_serial = itertools.count()

_NETNS_OK, _NETNS_WHY = netns.available()
requires_netns = pytest.mark.skipif(not _NETNS_OK, reason=f"netns mode unavailable: {_NETNS_WHY}")
"""Marker for tests that need netns mode (root and a working `ip netns`)."""

_SLURM_OK, _SLURM_WHY = sim_slurm.available()
requires_slurm = pytest.mark.skipif(not (_NETNS_OK and _SLURM_OK),
                                    reason=f"real Slurm unavailable: {_SLURM_WHY or _NETNS_WHY}")
"""Marker for tests that need real Slurm daemons in the test bed (slurm-wlm, munge, netns mode)."""



@pytest.fixture(scope="session")
def sim_cluster_factory() -> Iterator[Callable[..., Cluster]]:
    """`make(spec, mode="auto") -> Cluster`; every cluster made is torn down at session end."""
    made: list[Cluster] = []
    root = Path(tempfile.mkdtemp(prefix="pfsim-"))

    def make(spec: dict[str, Any], mode: str = "auto", **kw: Any) -> Cluster:
        if not os.path.exists(sshd.SSHD):
            pytest.skip(f"{sshd.SSHD} not found (apt-get install openssh-server)")
        if mode == "netns" and not _NETNS_OK:
            pytest.skip(f"netns mode unavailable: {_NETNS_WHY}")
        c = Cluster.up(dict(spec), dir=root / f"c{next(_serial)}", mode=mode, **kw)
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            try:
                c.down(purge=True)
            except Exception:  # keep tearing the others down
                pass
        try:
            os.rmdir(root)
        except OSError:
            pass


@pytest.fixture(scope="module")
def sim_cluster(request: pytest.FixtureRequest, sim_cluster_factory: Callable[..., Cluster]) -> Iterator[Cluster]:
    """A 2-node cluster per module; a module sets `SIM_SPEC = {...}` / `SIM_MODE` to change it."""
    spec = getattr(request.module, "SIM_SPEC", {"nodes": 2})
    mode = getattr(request.module, "SIM_MODE", "auto")
    c = sim_cluster_factory(spec, mode=mode)
    try:
        yield c
    finally:
        c.down(purge=True)


@pytest.fixture(scope="module")
def slurm_cluster(request: pytest.FixtureRequest, sim_cluster_factory: Callable[..., Cluster]) -> Iterator[Cluster]:
    """A netns cluster with real Slurm (slurmctld + one slurmd per node), one per module; a module
    sets `SLURM_SPEC = {...}` to change it (default 4 nodes). Skips with the reason where Slurm,
    munge, root or netns are missing."""
    if not (_NETNS_OK and _SLURM_OK):
        pytest.skip(f"real Slurm unavailable: {_SLURM_WHY or _NETNS_WHY}")
    spec = dict(getattr(request.module, "SLURM_SPEC", {"nodes": 4}), slurm=True)
    c = sim_cluster_factory(spec, mode="netns")
    try:
        yield c
    finally:
        c.down(purge=True)
