"""Parallel-layout arithmetic (tensor, pipeline, context, expert, data parallel sizes) for
Megatron-style training: shared by the plan.parallel check and the `preflight plan` command."""
