"""A test double of the few parts of torch that zerosim's torch hook touches
(python/zerosim_torch_hook.py), for machines without PyTorch (CI): tensors of Python floats, an
optimizer that keeps a step count, an LR scheduler, torch.save as a pickle, a generator state.
It computes nothing as torch would; it lets the hook's protocol be tested where torch is absent
(a line written when the next step ends, a save marking its step, the step taken from the
optimizer's state, rank 0 alone writing). The hook is run against PyTorch itself on the GPU
machine (docs/exec.md).
"""
import pickle
import struct

from . import cuda  # noqa: F401
from . import optim  # noqa: F401


class Tensor:
    def __init__(self, values):
        self.values = [float(value) for value in values]
        self.dtype = "float64"
        self.shape = (len(self.values),)

    def numel(self):
        return len(self.values)

    def detach(self):
        return self

    def double(self):
        return self

    def to(self, device):
        return self

    def contiguous(self):
        return self

    def clone(self):
        return Tensor(self.values)

    def item(self):
        return self.values[0]

    def untyped_storage(self):
        return struct.pack("<%dd" % len(self.values), *self.values)

    def backward(self):
        pass  # the test program sets the gradients itself


def tensor(values):
    return Tensor(values)


def get_rng_state():
    return Tensor([0.0])


def save(obj, target):
    if hasattr(target, "write"):
        pickle.dump(obj, target)
        return
    with open(target, "wb") as file:
        pickle.dump(obj, file)


def load(path):
    with open(path, "rb") as file:
        return pickle.load(file)
