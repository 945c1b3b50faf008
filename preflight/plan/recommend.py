"""Which of the valid layouts to use first, and how to launch it on both stacks (`preflight plan`).

The order is a rule, not a model of the hardware (docs/MIGRATION.md §1.2, §1.4):
  1. the write-ups' own per-scale templates come first: they are what converged in practice;
  2. every pipeline stage owns whole nodes (pp divides the node count): tensor and context
     parallelism stay on a node's HCCS/NVLink, only pipeline and data parallelism cross nodes;
  3. larger tensor parallelism inside the node first (the templates use tp 8, or 4 on Ascend);
  4. on Ascend, ep <= 4 (all-to-all above 4 congested the network, §1.4); cp 1 before cp > 1;
  5. pp closest to the node count (one stage per node, as the templates), then larger dp.
Megatron-LM and MindSpeed-LLM take the same Megatron arguments for these sizes; the stacks differ in
the launch environment (HCCL_* on Ascend, NCCL_* on NVIDIA) and MindSpeed's adaptor import.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .layout import Layout, Model, enumerate_layouts, rescaled_lr, template_for

ASCEND_EP_LIMIT = 4  # docs/MIGRATION.md §1.4


@dataclass(frozen=True)
class Ranked:
    layout: Layout
    dp: int
    template: bool
    key: tuple

    def reasons(self, nodes: int, per_node: int) -> list[str]:
        out = []
        if self.template:
            out.append("migration template")
        if nodes % self.layout.pp == 0:
            out.append("stages on whole nodes")
        if self.layout.tp == per_node:
            out.append("tp fills a node")
        return out


def rank(nodes: int, per_node: int, model: Model = Model(), max_cp: int = 1) -> list[Ranked]:
    """Every valid layout (tp inside a node), best first by the module's rule."""
    world = nodes * per_node
    out = []
    for lay in enumerate_layouts(nodes, per_node, model, max_cp=max_cp):
        tpl = template_for(nodes, world, lay) is not None
        dp = lay.dp(world)
        key = (not tpl, nodes % lay.pp != 0, -lay.tp, lay.ep > ASCEND_EP_LIMIT, lay.cp,
               abs(math.log2(lay.pp) - math.log2(nodes)), -dp, lay.ep)
        out.append(Ranked(lay, dp, tpl, key))
    return sorted(out, key=lambda r: r.key)


def megatron_args(lay: Layout, model: Model, seq_length: int | None = None, lr: float | None = None) -> list[str]:
    """The Megatron arguments for a layout; MindSpeed-LLM and Megatron-LM both parse these
    (megatron/training/arguments.py)."""
    args = [f"--tensor-model-parallel-size {lay.tp}", f"--pipeline-model-parallel-size {lay.pp}",
            f"--context-parallel-size {lay.cp}", f"--expert-model-parallel-size {lay.ep}"]
    for flag, value in (("--num-layers", model.num_layers), ("--num-attention-heads", model.heads),
                        ("--num-experts", model.experts), ("--seq-length", seq_length),
                        ("--micro-batch-size", model.micro_batch), ("--global-batch-size", model.global_batch)):
        if value is not None:
            args.append(f"{flag} {value}")
    if lr is not None:
        args.append(f"--lr {lr:.3g}")
    return args


def launch(lay: Layout, model: Model, nodes: int, per_node: int, seq_length: int | None = None,
           lr: float | None = None) -> dict[str, dict[str, object]]:
    """Per stack: the Megatron arguments, what differs, and the launch environment's variables."""
    common = megatron_args(lay, model, seq_length, lr)
    dist = {"NNODES": str(nodes), "NODE_RANK": "0..%d (master 0)" % (nodes - 1), "MASTER_ADDR": "the master's training-NIC address",
            "MASTER_PORT": "a free port outside HCCL's range and the ephemeral range"}
    return {
        "mindspeed-llm": {
            "stack": "MindSpeed-LLM on Ascend",
            "args": common + ["--distributed-backend nccl", "--transformer-impl local"],
            "notes": ["the training script imports mindspeed.megatron_adaptor (MindSpeed README, 快速上手)",
                      "--transformer-impl local from core_r0.12.0 on (MindSpeed README, 版本变更说明)",
                      "--distributed-backend nccl stays: MindSpeed maps it to HCCL"],
            "env": {"HCCL_IF_IP": "the node's training-NIC address", "HCCL_SOCKET_IFNAME": "=<training NIC>",
                    "GLOO_SOCKET_IFNAME": "<training NIC>", "ASCEND_RT_VISIBLE_DEVICES": ",".join(map(str, range(per_node))),
                    **dist},
        },
        "megatron-lm": {
            "stack": "Megatron-LM on NVIDIA",
            "args": common + ["--distributed-backend nccl"],
            "notes": [],
            "env": {"NCCL_SOCKET_IFNAME": "=<training NIC>", "GLOO_SOCKET_IFNAME": "<training NIC>",
                    "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(per_node))), **dist},
        },
    }


def lr_for(base_lr: float | None, dp: int, base_dp: int) -> float | None:
    return None if base_lr is None else rescaled_lr(base_lr, dp, base_dp)
