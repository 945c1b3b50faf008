"""One 8-node simulated cluster (netns mode) shared by the job tests: `preflight env`, `fix`,
ckpt.resume and sw.stack all read the same nodes; each test restores what it changes."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

SPEC = {"nodes": 8}


@pytest.fixture(scope="package")
def job_cluster(sim_cluster_factory):
    c = sim_cluster_factory(SPEC, mode="netns")
    try:
        yield c
    finally:
        c.down(purge=True)


def write_inventory(cluster, path: Path, job: dict[str, Any] | None = None, node_env_files: dict[str, list[str]] | None = None,
                    defaults: dict[str, Any] | None = None, drop_env: tuple[str, ...] = (),
                    checks: dict[str, Any] | None = None) -> Path:
    """The simulated cluster's own inventory plus a job: section (and per-node env_files)."""
    doc = yaml.safe_load(Path(cluster.inventory_path).read_text())
    if job is not None:
        doc["job"] = job
    if checks:
        doc["checks"] = checks
    doc["defaults"].update(defaults or {})
    for key in drop_env:  # leave the variable to the nodes' own env files
        doc["defaults"]["env"].pop(key, None)
    for entry in doc["nodes"]:
        extra = (node_env_files or {}).get(entry["name"])
        if extra:
            entry["env_files"] = list(doc["defaults"].get("env_files", [])) + extra
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
