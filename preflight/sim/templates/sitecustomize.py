"""preflight sim: a test-only hook on one simulated node's interpreter, never part of the product.

The simulator installs it only on a node given the `collective_wrong_sum` or `no_torch` fault: that
node's set_env.sh (sourced by the launch environment, as a real job's is) puts this directory on
PYTHONPATH and names the hooks in PF_SIM_HOOKS, so Python imports it at start-up (site's
sitecustomize step). smoke.allreduce's rank code is unchanged: what it meets is a node whose
collective returns a wrong sum, or whose python has no torch.
- no_torch: the interpreter's site-packages leave sys.path, so `import torch` fails with Python's
  own "No module named 'torch'".
- wrong_sum: torch.distributed.all_reduce adds 1 to this rank's contribution before reducing, so
  every rank of a group holding this node gets a sum off by one (a corrupting node or link).
"""
import importlib.abc
import importlib.machinery
import os
import sys

_HOOKS = set(filter(None, os.environ.get("PF_SIM_HOOKS", "").split(",")))

if "no_torch" in _HOOKS:
    sys.path[:] = [p for p in sys.path if not p.rstrip("/").endswith(("site-packages", "dist-packages"))]


class _WrongSum(importlib.abc.MetaPathFinder):
    """Patches torch.distributed.all_reduce right after torch.distributed is imported."""

    def find_spec(self, name, path, target=None):
        if name != "torch.distributed":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            real = module.all_reduce

            def all_reduce(tensor, *args, **kwargs):
                tensor.add_(1.0)
                return real(tensor, *args, **kwargs)

            module.all_reduce = all_reduce

        spec.loader.exec_module = exec_module
        return spec


if "wrong_sum" in _HOOKS:
    sys.meta_path.insert(0, _WrongSum())
