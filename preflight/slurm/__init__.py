"""Slurm as preflight's partner: read node states (sinfo), drain and resume by NHC's rule
(scontrol), select N usable nodes from an over-sized allocation, and fan out through srun
(preflight/transport/slurm.py).

Why a package of its own: every Slurm command is run here, with its failures turned into one
line and an exit code of their own (docs/SPEC.md §7), so a missing `scontrol`, a job without an
allocation or an operator-only command never ends in a traceback or in a node drained by mistake.
Parsing is pure (parse.py) and tested on output captured from real Slurm.
"""
