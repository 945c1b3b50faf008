"""NVIDIA GPU nodes: parsers of nvidia-smi, ibstat/ibstatus and kernel-log Xid lines, the Xid
table, and the probe commands the gpu.* / cuda.env / ib.link checks share."""
