"""Ascend: the probe commands several checks share (probes.py) and the pure parsers of the vendor
tools' output (npu_smi.py, hccn.py, versions.py), each tested on the real samples in tests/fixtures."""
