"""Loaded by every Python process that `zerosim exec --hooks torch` starts, before the user's code.

exec puts this directory first on PYTHONPATH and sets ZEROSIM_HOOKS; Python imports
`sitecustomize` at start-up (the site module), so the training script needs no edit. With
ZEROSIM_STATE_LOG set, the torch hook (zerosim_torch_hook.py, beside this directory) writes the
state log. A `sitecustomize` the environment already had is found further along the path and
run afterwards, so that the program starts as it would without exec.
"""
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _run_next_sitecustomize():
    others = [entry for entry in sys.path if os.path.abspath(entry or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _install():
    if os.environ.get("ZEROSIM_HOOKS") != "torch" or not os.environ.get("ZEROSIM_STATE_LOG"):
        return
    helpers = os.path.dirname(_HERE)
    if helpers not in sys.path:
        sys.path.append(helpers)
    import zerosim_torch_hook
    zerosim_torch_hook.install()


_install()
_run_next_sitecustomize()
