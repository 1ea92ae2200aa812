"""Report a training run's state to `zerosim exec` (the state-log contract).

After each step, append one JSON line to the file ZEROSIM_STATE_LOG names:
    {"step": N, "loss": X, "components": {NAME: HEX_DIGEST, ...}, "checkpoint": true?}
"checkpoint": true when that step's save has returned (the program now believes it durable).
Without ZEROSIM_STATE_LOG nothing is written, so the lines can stay in a script for good.

Standard library only; `torch_components` uses torch when it is importable.

Random generators are components of their own (`rng_components`): rng_python, rng_numpy,
rng_torch, rng_cuda. Python's and NumPy's global generators are seeded from the operating system
at start-up, so in a program that never seeds them they differ in every process, resumed or
not: they are reported only once the program seeded them (or restored their state), which this
module sees from the moment it is imported. torch's generators start from a fixed seed and are
always reported. `zerosim exec --ignore-component NAME` leaves out any other component the
program does not make deterministic.

    import zerosim_state
    log = zerosim_state.StateLog()
    ...
    log.step(step, loss.item(), zerosim_state.torch_components(model, optimizer, scheduler, scaler),
             checkpoint=saved_this_step)

With a framework, one callback writes the log (the framework is imported only by its module):
    from zerosim_state.huggingface import ZerosimCallback   # trainer.add_callback(ZerosimCallback())
    from zerosim_state.lightning import ZerosimCallback     # Trainer(callbacks=[ZerosimCallback()])
"""
import hashlib
import json
import os
import random
import struct
import sys

__all__ = ["HeldStep", "StateLog", "digest_bytes", "digest_floats", "digest_value", "program_writes_log",
           "rng_components", "torch_components", "write_safetensors"]


def digest_bytes(*chunks):
    """A 32-hex-digit digest of byte strings (with their lengths, so that boundaries count)."""
    hasher = hashlib.blake2b(digest_size=16)
    for chunk in chunks:
        hasher.update(struct.pack("<Q", len(chunk)))
        hasher.update(chunk)
    return hasher.hexdigest()


def digest_floats(values):
    """The digest of a sequence of floats, by their IEEE-754 double bits."""
    values = list(values)
    return digest_bytes(struct.pack("<%dd" % len(values), *values))


def digest_value(value):
    """The digest of a JSON-like value (ints, floats by their bits, strings, lists, dicts by key)."""
    return digest_bytes(_canonical(value).encode("utf-8"))


def _canonical(value):
    if isinstance(value, float):
        return "f" + struct.pack("<d", value).hex()
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return "i%d" % value
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (bytes, bytearray)):
        return "b" + bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_canonical(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_canonical(str(key)) + ":" + _canonical(value[key]) for key in sorted(value, key=str)) + "}"
    tensor_bytes = _tensor_bytes(value)
    if tensor_bytes is not None:
        return "t" + digest_bytes(tensor_bytes)
    raise TypeError("zerosim_state: cannot digest a %s" % type(value).__name__)


def _tensor_bytes(value):
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    import torch
    if isinstance(value, torch.Tensor):
        tensor = value.detach().to("cpu").contiguous().clone()
        header = ("%s%s" % (tensor.dtype, tuple(tensor.shape))).encode("utf-8")
        return header + _storage_bytes(tensor)
    return None


def _storage_bytes(tensor):
    """The bytes of a contiguous tensor that owns its whole storage (a fresh clone)."""
    if hasattr(tensor, "untyped_storage"):
        return bytes(tensor.untyped_storage())
    return bytes(tensor.storage().untyped())  # torch before 2.0


# Whether the program made a global generator deterministic: seeded it with a value, or restored
# a state (a resume from its checkpoint). A seed of None draws from the operating system.
_DETERMINISTIC = {"python": False, "numpy": False}


def _track_python_random():
    original_seed, original_setstate = random.seed, random.setstate

    def seed(a=None, version=2):
        _DETERMINISTIC["python"] = a is not None
        return original_seed(a, version)

    def setstate(state):
        _DETERMINISTIC["python"] = True
        return original_setstate(state)

    random.seed, random.setstate = seed, setstate


def _track_numpy_random():
    """Wraps numpy.random's global seed and set_state, once numpy is imported."""
    numpy = sys.modules.get("numpy")
    if numpy is None or getattr(numpy.random, "_zerosim_tracked", False):
        return
    original_seed, original_set_state = numpy.random.seed, numpy.random.set_state

    def seed(seed=None):
        _DETERMINISTIC["numpy"] = seed is not None
        return original_seed(seed)

    def set_state(state, *args, **kwargs):
        _DETERMINISTIC["numpy"] = True
        return original_set_state(state, *args, **kwargs)

    numpy.random.seed, numpy.random.set_state = seed, set_state
    numpy.random._zerosim_tracked = True


_track_python_random()
_track_numpy_random()


def rng_components():
    """Digests of the global random generators the run can reproduce, one component each:
    rng_python and rng_numpy once seeded (or restored), rng_torch and rng_cuda when torch is
    loaded (and CUDA initialised)."""
    _track_numpy_random()
    components = {}
    if _DETERMINISTIC["python"]:
        components["rng_python"] = digest_value(repr(random.getstate()))
    numpy = sys.modules.get("numpy")
    if numpy is not None and _DETERMINISTIC["numpy"]:
        components["rng_numpy"] = digest_value(repr(numpy.random.get_state()))
    torch = sys.modules.get("torch")
    if torch is not None:
        components["rng_torch"] = digest_value(torch.get_rng_state())
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            components["rng_cuda"] = digest_value(list(torch.cuda.get_rng_state_all()))
    return components


def torch_components(model=None, optimizer=None, scheduler=None, scaler=None, rng=True, data_position=None):
    """Digests of a torch run's state, one component per part (compared by name)."""
    components = {}
    if model is not None:
        components["params"] = digest_value(dict(model.state_dict()))
    if optimizer is not None:
        components["optimizer"] = digest_value(optimizer.state_dict())
    if scheduler is not None:
        components["scheduler"] = digest_value(scheduler.state_dict())
    if scaler is not None:
        components["scaler"] = digest_value(scaler.state_dict())
    if rng:
        components.update(rng_components())
    if data_position is not None:
        components["data"] = digest_value(data_position)
    return components


# Whether the program writes the state log itself (a StateLog it made, a ZerosimCallback): the
# torch hook of `zerosim exec --hooks torch` then writes nothing, so that no step is logged twice.
_PROGRAM_WRITES_LOG = {"value": False}


def program_writes_log():
    return _PROGRAM_WRITES_LOG["value"]


class StateLog:
    """Appends the state-log lines; a no-op when ZEROSIM_STATE_LOG is not set."""

    def __init__(self, path=None, _by_hook=False):
        self.path = path if path is not None else os.environ.get("ZEROSIM_STATE_LOG")
        if self.path and not _by_hook:
            _PROGRAM_WRITES_LOG["value"] = True

    def step(self, step, loss, components, checkpoint=False, capture=None):
        """`capture`: NAME -> list of floats (stored as F64) or a torch tensor; written as
        safetensors to ZEROSIM_CAPTURE_FILE when ZEROSIM_CAPTURE_STEP is this step (zerosim exec
        asks for it to name the first differing element of a divergence)."""
        if capture is not None and os.environ.get("ZEROSIM_CAPTURE_STEP") == str(int(step)):
            write_safetensors(os.environ["ZEROSIM_CAPTURE_FILE"], capture)
        if not self.path:
            return
        line = {"step": int(step), "loss": float(loss), "components": dict(components)}
        if checkpoint:
            line["checkpoint"] = True
        with open(self.path, "a") as log:
            log.write(json.dumps(line, sort_keys=True) + "\n")


class HeldStep:
    """The line of the step that just ended, held until the program goes on (the next step begins,
    or training ends), so that it can say "checkpoint": true for a save that returned in between.
    Written only then, the line comes after every file of that save: a crash in the middle of a
    save never counts as a save that had returned. The capture exec asks for (the state of one
    step) is written when the step is held, while the state is that step's."""

    def __init__(self, log=None):
        self.log = log if log is not None else StateLog()
        self._held = None  # [step, loss, components, checkpoint]

    def hold(self, step, loss, components, capture=None):
        self.write()
        if capture is not None and os.environ.get("ZEROSIM_CAPTURE_STEP") == str(int(step)):
            capture = capture() if callable(capture) else capture
            write_safetensors(os.environ["ZEROSIM_CAPTURE_FILE"], capture)
        self._held = [int(step), float(loss), dict(components), False]

    def held_step(self):
        return None if self._held is None else self._held[0]

    def mark_checkpoint(self):
        """A save returned (or, for a framework that calls back before its files are written,
        is under way and ends before the program goes on) since the held step ended."""
        if self._held is not None:
            self._held[3] = True

    def write(self):
        held, self._held = self._held, None
        if held is not None:
            self.log.step(held[0], held[1], held[2], checkpoint=held[3])


def write_safetensors(path, tensors):
    """Writes NAME -> list of floats (F64) or torch tensor as a safetensors file."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        value = tensors[name]
        tensor_bytes = _tensor_bytes(value)
        if tensor_bytes is not None:
            import torch
            tensor = value.detach().to("cpu").contiguous()
            dtypes = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
                      torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}
            dtype, shape = dtypes[tensor.dtype], list(tensor.shape)
            data = _storage_bytes(tensor.clone())
        else:
            values = [float(item) for item in value]
            dtype, shape = "F64", [len(values)]
            data = struct.pack("<%dd" % len(values), *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, sort_keys=True).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
