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
save, safetensors' save_file and save_model. The Hugging Face Trainer and PyTorch Lightning are
recognised when imported: each Trainer built gets a callback of the hook through the framework's
own callback list (the Trainer's on_save, called once every file of the checkpoint is written;
Lightning's on_save_checkpoint), and from then on only those mark a save. Writing the line
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
    "held": None,  # zerosim_state.HeldStep: the last step's line, written at the next step or at exit
    "framework_marks": False,  # a framework's callback marks its saves: the saves inside it do not
    "warned": set(),
}
_schedulers = weakref.WeakSet()
_scalers = weakref.WeakSet()


def _warn_once(key, message):
    if key in _state["warned"]:
        return
    _state["warned"].add(key)
    sys.stderr.write("zerosim hook: %s\n" % message)


def _held():
    if _state["held"] is None:
        # Under a launcher (torchrun, accelerate) every rank runs the hook; rank 0 writes the log,
        # as the ranks of a data-parallel run hold the same parameters and optimizer state.
        path = os.environ.get("ZEROSIM_STATE_LOG") if os.environ.get("RANK", "0") == "0" else ""
        _state["held"] = zerosim_state.HeldStep(zerosim_state.StateLog(path, _by_hook=True))
    return _state["held"]


def _program_writes_log():
    """A program that writes the state log itself (zerosim_state.StateLog, a ZerosimCallback) is
    left to it: the hook writes nothing, so that no step is logged twice."""
    if zerosim_state.program_writes_log():
        _warn_once("program", "the program writes the state log itself; the hook writes nothing")
        return True
    return False


def _flush():
    if not _program_writes_log():
        _held().write()


def _digest(name, value):
    try:
        return zerosim_state.digest_value(value)
    except (TypeError, RuntimeError) as error:
        _warn_once(name, "component %s is not logged: %s" % (name, error))
        return None


def _wraps(candidate, optimizer):
    """Whether `candidate` is the optimizer or a wrapper of it (accelerate's AcceleratedOptimizer,
    which the Hugging Face Trainer builds its LR scheduler on, keeps the optimizer it wraps as
    .optimizer)."""
    for _ in range(4):
        if candidate is optimizer:
            return True
        candidate = getattr(candidate, "optimizer", None)
        if candidate is None:
            return False
    return False


def _components(optimizer):
    parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]
    components = {"params": _digest("params", parameters), "optimizer": _digest("optimizer", optimizer.state_dict())}
    schedulers = [scheduler for scheduler in list(_schedulers) if _wraps(getattr(scheduler, "optimizer", None), optimizer)]
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
    if _program_writes_log():
        return
    _state["steps"] += 1
    step = _global_step(optimizer)
    loss = _state["loss"]
    if loss is None:
        _warn_once("loss", "no one-element tensor ran backward before the step; the loss is logged as 0")
        loss = 0.0
    _held().hold(step, loss, _components(optimizer), capture=lambda: _capture(optimizer))


def _capture(optimizer):
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
    return tensors


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
    if not _state["framework_marks"]:
        _held().mark_checkpoint()


def _wrap_save(function):
    def save(*args, **kwargs):
        result = function(*args, **kwargs)
        _save_returned()
        return result

    save.__wrapped__ = function
    return save


def _recognise_trainer(framework, trainer_module, callback_module, base_name, save_event, add):
    """Each Trainer of a framework gets a callback of the hook once it is built, through the
    framework's own callback list (`add`); its `save_event` marks the held step, and from then on
    a torch.save of something else marks nothing."""
    callback_base = getattr(callback_module, base_name, None)
    trainer_class = getattr(trainer_module, "Trainer", None)
    if callback_base is None or trainer_class is None:
        _warn_once(framework, "%s's Trainer or %s is missing; its saves are seen as files only" % (framework, base_name))
        return
    marks = type("ZerosimSaveMarks", (callback_base,), {save_event: lambda self, *args, **kwargs: _held().mark_checkpoint()})
    original = trainer_class.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        add(self, marks())
        _state["framework_marks"] = True

    trainer_class.__init__ = __init__


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
        # The Trainer calls on_save once every file of the checkpoint is written. (transformers.trainer
        # imports trainer_callback itself: loaded by now.)
        _recognise_trainer("transformers", module, importlib.import_module("transformers.trainer_callback"),
                           "TrainerCallback", "on_save", lambda trainer, callback: trainer.add_callback(callback))
    elif name in ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer"):
        # Lightning calls on_save_checkpoint while it builds the checkpoint; the step's line is
        # written only once the program goes on (after the next step), when the save has returned.
        _recognise_trainer("Lightning", module, importlib.import_module(name.split(".trainer.")[0] + ".callbacks"),
                           "Callback", "on_save_checkpoint", lambda trainer, callback: trainer.callbacks.append(callback))


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
