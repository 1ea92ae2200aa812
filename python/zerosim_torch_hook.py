"""The state log of an unmodified PyTorch program, for `zerosim exec --hooks torch`.

Installed at interpreter start-up (hooks/sitecustomize.py); it waits for torch to be imported,
then follows the first `torch.optim.Optimizer` that steps. After each of its steps it takes:
  step        the run's step: the optimizer's own step count, which a resume restores (without
              one, as in plain SGD, this process's steps: a resume would start again at 1)
  loss        the value of the last one-element tensor `backward` ran on (with a GradScaler, the
              scaled loss: the same in every run of the same program)
  components  params (the optimizer's parameters, group by group), optimizer (its state_dict),
              scheduler (the LR schedulers built on it), scaler (the GradScalers), and the random
              generators (zerosim_state.rng_components: rng_torch, rng_cuda, and Python's and
              NumPy's once the program seeded them)
A step's line is written when the next step ends, or when the process exits, so that it can say
"checkpoint": true when a save returned in between: torch.save, torch.distributed.checkpoint's
save, safetensors' save_file and save_model, and the Hugging Face Trainer's and PyTorch
Lightning's checkpoint calls (a save inside those counts once theirs returns). Writing the line
after every file of the checkpoint also means that a crash between two of its files never counts
as a checkpoint that had returned.

What it cannot see: a second optimizer (only the first that steps is followed), a data loader's
position, state outside the optimizer (a model's buffers, an EMA copy), a save by other means
(pickle, numpy, a custom writer: no "checkpoint" mark, so no lost-work verdict), steps that a
GradScaler skipped (no optimizer step, no line). docs/exec.md lists these too.
"""
import atexit
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types
import weakref

import zerosim_state

_state = {
    "installed": False,
    "optimizer": None,  # a weak reference to the optimizer followed
    "steps": 0,
    "loss": None,
    "pending": None,  # the last step's line, written at the next step or at exit
    "saving_depth": 0,  # inside a framework's checkpoint call: inner saves do not count alone
    "warned": set(),
}
_schedulers = weakref.WeakSet()
_scalers = weakref.WeakSet()


def _warn_once(key, message):
    if key in _state["warned"]:
        return
    _state["warned"].add(key)
    sys.stderr.write("zerosim hook: %s\n" % message)


def _write(line):
    path = os.environ.get("ZEROSIM_STATE_LOG")
    # Under a launcher (torchrun, accelerate) every rank runs the hook; rank 0 writes the log, as
    # the ranks of a data-parallel run hold the same parameters and optimizer state.
    if not path or os.environ.get("RANK", "0") != "0":
        return
    with open(path, "a") as log:
        log.write(json.dumps(line, sort_keys=True) + "\n")


def _flush():
    pending = _state["pending"]
    _state["pending"] = None
    if pending is not None:
        _write(pending)


def _digest(name, value):
    try:
        return zerosim_state.digest_value(value)
    except (TypeError, RuntimeError) as error:
        _warn_once(name, "component %s is not logged: %s" % (name, error))
        return None


def _components(optimizer):
    parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]
    components = {"params": _digest("params", parameters), "optimizer": _digest("optimizer", optimizer.state_dict())}
    schedulers = [scheduler for scheduler in list(_schedulers) if getattr(scheduler, "optimizer", None) is optimizer]
    if schedulers:
        components["scheduler"] = _digest("scheduler", [scheduler.state_dict() for scheduler in schedulers])
    scalers = list(_scalers)
    if scalers:
        components["scaler"] = _digest("scaler", [scaler.state_dict() for scaler in scalers])
    components.update(zerosim_state.rng_components())
    return {name: digest for name, digest in components.items() if digest is not None}


def _after_step(optimizer):
    followed = _state["optimizer"]
    if followed is None:
        _state["optimizer"] = weakref.ref(optimizer)
    elif followed() is not optimizer:
        _warn_once("optimizers", "a second optimizer steps; only the first is followed")
        return
    _flush()
    _state["steps"] += 1
    step = _global_step(optimizer)
    loss = _state["loss"]
    if loss is None:
        _warn_once("loss", "no one-element tensor ran backward before the step; the loss is logged as 0")
        loss = 0.0
    _state["pending"] = {"step": step, "loss": loss, "components": _components(optimizer)}
    if os.environ.get("ZEROSIM_CAPTURE_STEP") == str(step) and os.environ.get("ZEROSIM_CAPTURE_FILE"):
        _capture(optimizer, os.environ["ZEROSIM_CAPTURE_FILE"])


def _capture(optimizer, path):
    """The full state after this step, for exec to name the first differing element: each
    parameter (params.G.I: group G, position I) and each tensor of its optimizer state
    (optimizer.G.I.NAME)."""
    import torch
    tensors = {}
    for g, group in enumerate(optimizer.param_groups):
        for i, parameter in enumerate(group["params"]):
            tensors["params.%d.%d" % (g, i)] = parameter
            for name, value in optimizer.state.get(parameter, {}).items():
                if isinstance(value, torch.Tensor):
                    tensors["optimizer.%d.%d.%s" % (g, i, name)] = value
    zerosim_state.write_safetensors(path, tensors)


def _global_step(optimizer):
    """The run's step, which a resume restores with the optimizer: the largest per-parameter step
    count in its state (Adam, AdamW and most of torch.optim keep one). An optimizer without one
    (plain SGD) is numbered by this process's steps, so a resumed process starts again at 1."""
    counts = []
    for parameter_state in optimizer.state.values():
        count = parameter_state.get("step") if isinstance(parameter_state, dict) else None
        if count is None:
            continue
        try:
            counts.append(int(count.item() if hasattr(count, "item") else count))
        except (TypeError, ValueError):
            continue
    if counts:
        return max(counts)
    _warn_once("step", "the optimizer keeps no step count; steps are numbered from this process's start")
    return _state["steps"]


def _save_returned():
    if _state["saving_depth"] == 0 and _state["pending"] is not None:
        _state["pending"]["checkpoint"] = True


def _wrap_save(function):
    def save(*args, **kwargs):
        result = function(*args, **kwargs)
        _save_returned()
        return result

    save.__wrapped__ = function
    return save


def _wrap_framework_save(function):
    """A framework's checkpoint call: the saves inside it count once it returns."""
    def save(*args, **kwargs):
        _state["saving_depth"] += 1
        try:
            result = function(*args, **kwargs)
        finally:
            _state["saving_depth"] -= 1
        _save_returned()
        return result

    save.__wrapped__ = function
    return save


def _wrap_init(cls, registry):
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        registry.add(self)

    cls.__init__ = __init__


def _patch_torch(torch):
    original_backward = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        if self.numel() == 1:
            _state["loss"] = float(self.detach().double().item())
        return original_backward(self, *args, **kwargs)

    torch.Tensor.backward = backward
    torch.save = _wrap_save(torch.save)
    # torch.optim deletes its submodules' names from its namespace: they are found by module name.
    optimizer_module = importlib.import_module("torch.optim.optimizer")
    scheduler_module = importlib.import_module("torch.optim.lr_scheduler")
    register = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
    if register is not None:
        register(lambda optimizer, args, kwargs: _after_step(optimizer))
    else:  # torch before 2.0: each optimizer's step, wrapped when it is built
        original_init = torch.optim.Optimizer.__init__

        def __init__(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            step = type(self).step

            def stepped(this, *step_args, **step_kwargs):
                result = step(this, *step_args, **step_kwargs)
                _after_step(this)
                return result

            # A bound method, as the LR schedulers expect of optimizer.step (they wrap its __func__).
            self.step = types.MethodType(stepped, self)

        torch.optim.Optimizer.__init__ = __init__
    scheduler = getattr(scheduler_module, "LRScheduler", None) or scheduler_module._LRScheduler
    _wrap_init(scheduler, _schedulers)
    for module_name in ("amp", "cuda.amp"):
        module = torch
        for part in module_name.split("."):
            module = getattr(module, part, None)
        scaler = getattr(module, "GradScaler", None) if module is not None else None
        if scaler is not None and not getattr(scaler, "_zerosim_tracked", False):
            _wrap_init(scaler, _scalers)
            scaler._zerosim_tracked = True


def _patch_module(name, module):
    if name == "torch":
        _patch_torch(module)
    elif name == "torch.distributed.checkpoint":
        for function in ("save", "save_state_dict"):
            if hasattr(module, function):
                setattr(module, function, _wrap_save(getattr(module, function)))
    elif name == "safetensors.torch":
        for function in ("save_file", "save_model"):
            if hasattr(module, function):
                setattr(module, function, _wrap_save(getattr(module, function)))
    elif name == "transformers.trainer":
        trainer = getattr(module, "Trainer", None)
        if trainer is not None and hasattr(trainer, "_save_checkpoint"):
            trainer._save_checkpoint = _wrap_framework_save(trainer._save_checkpoint)
    elif name in ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer"):
        trainer = getattr(module, "Trainer", None)
        if trainer is not None and hasattr(trainer, "save_checkpoint"):
            trainer.save_checkpoint = _wrap_framework_save(trainer.save_checkpoint)


_WATCHED = ("torch", "torch.distributed.checkpoint", "safetensors.torch", "transformers.trainer",
            "lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, name):
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _patch_module(self._name, module)


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a watched module right after it is executed, before any user code sees it."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _WATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


def install():
    if _state["installed"]:
        return
    _state["installed"] = True
    for name in _WATCHED:
        if name in sys.modules:
            _patch_module(name, sys.modules[name])
    sys.meta_path.insert(0, _Finder())
    atexit.register(_flush)
