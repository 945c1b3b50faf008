"""The runner's parts (preflight.runner puts them together):

selection.py    which checks run, in which order, with which parameters (fixed for a run)
state.py        what one node's worker knows (NodeRun) and what every phase shares (Shared)
batches.py      one node's probes as one batch: deduplicated, refused unless built by cmd()
outcomes.py     the results the runner writes itself: unreachable, probes not run, errors
node_phase.py   per node: connect, backend, gather (two rounds), parse, evaluate node checks
cluster_phase.py  over the reachable nodes: plan rounds (reconnecting when needed), evaluate
assemble.py     the finished Report: missing results named, secrets redacted, actions assigned
"""
