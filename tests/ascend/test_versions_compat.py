"""Version files and compatibility fields (docs/FORMATS.md §4) on the real samples."""
from __future__ import annotations

import pytest

from preflight.ascend import versions
from tests.support import fixture_body, fixture_names


@pytest.mark.parametrize("name", fixture_names("ascend_toolkit_install.info__") + fixture_names("ascend_nnae_install.info__"))
def test_install_info_samples(name):
    for block in fixture_body(name).strip().split("\n\n"):  # two files concatenated in some samples
        info = versions.parse_info(block)
        assert info["package_name"].startswith("Ascend-cann-") and info["version"] in name
        assert versions.parse_ranges(info["compatible_version"])


def test_mindcluster_set_is_incompatible():
    drv = versions.parse_info(fixture_body("driver_version.info__23.0.7__mindcluster-fixture.txt"))
    fw = versions.parse_info(fixture_body("firmware_version.info__7.1.0.11.220__mindcluster-fixture.txt"))
    tk = versions.parse_info(fixture_body("ascend_toolkit_install.info__7.0.T10__mindcluster-fixture.txt"))
    ranges = versions.parse_ranges(fw["compatible_version_drv"])
    assert ranges == [("23.0.rc3", "23.0.rc3."), ("23.0.0", "23.0.0.")]
    assert not any(versions.in_version_range(drv["Version"], lo, hi) for lo, hi in ranges)
    assert versions.in_version_range(fw["Version"], *versions.parse_ranges(drv["compatible_version_fw"])[0])
    assert versions.code_compatible(drv["Innerversion"], tk["compatible_version"]) is False


@pytest.mark.parametrize("version,low,high,inside", [
    ("23.0.0", "23.0.0", "23.0.0.", True), ("23.0.0.5", "23.0.0", "23.0.0.", True),
    ("23.0.rc3", "23.0.rc3", "23.0.rc3.", True), ("23.0.7", "23.0.0", "23.0.0.", False),
    ("23.0.rc3", "23.0.0", "23.0.0.", False), ("7.1.0.11.220", "7.0.0", "7.1.99", True),
    ("7.2.0", "7.0.0", "7.1.99", False),
])
def test_version_range(version, low, high, inside):
    assert versions.in_version_range(version, low, high) is inside


def test_code_ranges():
    nnae = "[V100R001C13,V100R001C19],[V100R001C30]"  # ranged form of the nnae sample
    assert versions.code_compatible("V100R001C15SPC012B220", nnae) is True
    assert versions.code_compatible("V100R001C20", nnae) is False
    assert versions.code_compatible("garbage", nnae) is None
