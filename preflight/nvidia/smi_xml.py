"""`nvidia-smi -q -x`, NVIDIA's machine interface, read into the same QueryReport as the text form.

Why XML first: its element names are fixed by a versioned DTD (`nvsmi_device_v10.dtd` ...
`_v13.dtd`; drivers before ~R440 print no DOCTYPE) where the text form pads, renames and nests
keys by hand. The reader maps the elements gpu.health and gpu.topology read onto the text form's
key paths (XML_FIELDS), so one judgement serves both forms and gives the same verdicts on the same
GPU (tests/nvidia/test_smi_xml.py holds that on a real H200's pair of captures). Samples, driver
418, 515, 535 (MIG), 580 and 595: tests/fixtures/nvidia/nvidia-smi_-q_-x__*.

Node output is hostile: the stdlib parser (expat) expands entities an internal DTD subset
declares (a "billion laughs" document), though it fetches nothing external. nvidia-smi's own
header is exactly `<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_vNN.dtd">`, which is removed
before parsing; any other DOCTYPE or an ENTITY declaration is refused (ParseError), so no entity
is ever declared. Only direct children are read (a MIG device nests its own ECC and memory
elements under the GPU).
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ..checkapi import ParseError
from .nvidia_smi import QueryGpu, QueryReport, Tree, _int

_OWN_DOCTYPE = re.compile(r'<!DOCTYPE\s+nvidia_smi_log\s+SYSTEM\s+"[\w.\-]+"\s*>')
_LINK = "pci/pci_gpu_link_info/"
# element path under <gpu> -> the text form's key path (preflight/nvidia/nvidia_smi.py reads these)
XML_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("product_name", ("Product Name",)),
    ("uuid", ("GPU UUID",)),
    ("persistence_mode", ("Persistence Mode",)),
    ("gpu_reset_status/reset_required", ("GPU Reset Status", "Reset Required")),
    ("gpu_reset_status/drain_and_reset_recommended", ("GPU Reset Status", "Drain and Reset Recommended")),
    ("remapped_rows/remapped_row_pending", ("Remapped Rows", "Pending")),
    ("remapped_rows/remapped_row_failure", ("Remapped Rows", "Remapping Failure Occurred")),
    ("retired_pages/pending_blacklist", ("Retired Pages", "Pending Page Blacklist")),
    (_LINK + "pcie_gen/max_link_gen", ("PCI", "GPU Link Info", "PCIe Generation", "Max")),
    (_LINK + "pcie_gen/current_link_gen", ("PCI", "GPU Link Info", "PCIe Generation", "Current")),
    (_LINK + "pcie_gen/device_current_link_gen", ("PCI", "GPU Link Info", "PCIe Generation", "Device Current")),
    (_LINK + "pcie_gen/max_device_link_gen", ("PCI", "GPU Link Info", "PCIe Generation", "Device Max")),
    (_LINK + "link_widths/max_link_width", ("PCI", "GPU Link Info", "Link Width", "Max")),
    (_LINK + "link_widths/current_link_width", ("PCI", "GPU Link Info", "Link Width", "Current")),
    ("fabric/state", ("Fabric", "State")),
    ("fabric/status", ("Fabric", "Status")),
    ("fb_memory_usage/used", ("FB Memory Usage", "Used")),
    ("fb_memory_usage/total", ("FB Memory Usage", "Total")),
)
# <clocks_event_reasons> (R530+) / <clocks_throttle_reasons>: element suffix -> the text form's reason
REASONS = {"gpu_idle": "Idle", "applications_clocks_setting": "Applications Clocks Setting",
           "sw_power_cap": "SW Power Cap", "hw_slowdown": "HW Slowdown", "hw_thermal_slowdown": "HW Thermal Slowdown",
           "hw_power_brake_slowdown": "HW Power Brake Slowdown", "sync_boost": "Sync Boost",
           "sw_thermal_slowdown": "SW Thermal Slowdown", "display_clocks_setting": "Display Clock Setting"}
REASON_BLOCKS = (("clocks_event_reasons", "clocks_event_reason_", "Clocks Event Reasons"),
                 ("clocks_throttle_reasons", "clocks_throttle_reason_", "Clocks Throttle Reasons"))


def is_xml(text: str) -> bool:
    head = text.lstrip()[:200]
    return head.startswith("<?xml") or head.startswith("<nvidia_smi_log")


def _words(tag: str) -> str:
    """`sram_uncorrectable_parity` -> `SRAM Uncorrectable Parity`, `double_bit` -> `Double Bit`."""
    return " ".join(w.upper() if w in ("sram", "dram") else w.capitalize() for w in tag.split("_"))


def _put(tree: Tree, path: tuple[str, ...], value: str) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _leaves(el: ET.Element, prefix: tuple[str, ...]):
    for child in el:
        if len(child):
            yield from _leaves(child, prefix + (_words(child.tag),))
        else:
            yield prefix + (_words(child.tag),), (child.text or "").strip()


def _gpu_tree(gpu: ET.Element) -> Tree:
    tree: Tree = {}
    for path, keys in XML_FIELDS:
        el = gpu.find(path)
        if el is not None and not len(el):
            _put(tree, keys, (el.text or "").strip())
    for kind in ("volatile", "aggregate"):
        el = gpu.find(f"ecc_errors/{kind}")
        if el is not None:
            for keys, value in _leaves(el, ("ECC Errors", kind.capitalize())):
                _put(tree, keys, value)
    for block, prefix, section in REASON_BLOCKS:
        el = gpu.find(block)
        if el is not None:
            for child in el:
                name = REASONS.get(child.tag.removeprefix(prefix))
                if name:
                    _put(tree, (section, name), (child.text or "").strip())
    return tree


def parse_query_xml(text: str) -> QueryReport:
    """`nvidia-smi -q -x` -> QueryReport (GPUs in the document's order, as `-q` lists them)."""
    body = _OWN_DOCTYPE.sub("", text, count=1)
    if "<!DOCTYPE" in body or "<!ENTITY" in body:
        raise ParseError("nvidia-smi -q -x: a DOCTYPE or ENTITY declaration that is not nvidia-smi's own: "
                         "refused (entity expansion)", text[:300])
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise ParseError(f"nvidia-smi -q -x: not well-formed XML ({exc})", text) from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"nvidia-smi -q -x: root element <{root.tag}>, expected <nvidia_smi_log>", text)
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        tree = _gpu_tree(g)
        gpus.append(QueryGpu(index=i, bus_id=g.get("id", ""), name=str(tree.get("Product Name", "")),
                             uuid=str(tree.get("GPU UUID", "")), tree=tree))
    return QueryReport(driver_version=root.findtext("driver_version"), cuda_version=root.findtext("cuda_version"),
                       attached=_int(root.findtext("attached_gpus")), gpus=tuple(gpus))


def read_query(text: str) -> QueryReport:
    """The answer of the `-q` probe in either form: XML (`-q -x`) where the driver printed it, else text."""
    if is_xml(text):
        return parse_query_xml(text)
    from .nvidia_smi import parse_query
    return parse_query(text)
