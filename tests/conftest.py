"""Shared test configuration: the simulated-cluster fixtures and the `requires_netns` marker."""
import pytest

from preflight.sim.netns import available as _netns_available

pytest_plugins = ["preflight.sim.fixtures"]

_NETNS_OK, _NETNS_WHY = _netns_available()
requires_netns = pytest.mark.skipif(not _NETNS_OK, reason=f"netns mode unavailable: {_NETNS_WHY}")
"""Skip a test (with the reason) where netns mode cannot run: not root, or `ip netns` fails.
Import it as `from tests.conftest import requires_netns` or use preflight.sim.fixtures.requires_netns."""
