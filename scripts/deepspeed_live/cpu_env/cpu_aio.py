"""DeepSpeed's NVMe swapper on its CPU accelerator (docs/deepspeed-live.md, "DeepSpeed on the
CPU machine"). Imported after DeepSpeed.

DeepSpeed 0.14.5's CPU accelerator knows no `AsyncIOBuilder` (it hands back a builder that
refuses), so ZeRO-3 cannot put the optimizer on NVMe there. The op itself is host code:
DeepSpeed's libaio reader and writer (csrc/aio), which its CUDA accelerator builds with the
generic `op_builder.async_io.AsyncIOBuilder`. This hands the CPU accelerator that same builder
class (and rebinds the name where DeepSpeed's modules already took the refusing one), and
gives the swap buffers the page alignment that O_DIRECT needs (the CUDA accelerator's
page-locked buffers have it); nothing else changes: the swapper, the optimizer and the
checkpoint code that run are DeepSpeed's. The buffers are not page-locked (no CUDA here), which
only the speed of a copy can tell.
"""

import sys

import torch
from deepspeed.accelerator import get_accelerator
from deepspeed.ops.op_builder.async_io import AsyncIOBuilder

_accelerator = get_accelerator()
if _accelerator.device_name() != "cpu":
    raise RuntimeError(f"cpu_aio: the accelerator is {_accelerator.device_name()!r}, not the CPU one")
_get_op_builder = _accelerator.get_op_builder
_refusing_builder = _get_op_builder("AsyncIOBuilder")


def _get_op_builder_with_aio(class_name):
    return AsyncIOBuilder if class_name == "AsyncIOBuilder" else _get_op_builder(class_name)


_accelerator.get_op_builder = _get_op_builder_with_aio

PAGE_BYTES = 4096


def _pin_memory_page_aligned(tensor, align_bytes=1):
    """A copy of `tensor` that starts on a page. The op opens its files with O_DIRECT, which
    needs the buffers aligned; page-locked memory from the CUDA accelerator is, while the CPU
    accelerator's pin_memory returns the tensor as it is (64-byte aligned): the op's writes
    then fail and leave empty files."""
    count = tensor.numel()
    raw = torch.empty(count + PAGE_BYTES // tensor.element_size(), dtype=tensor.dtype)
    offset = (-raw.data_ptr() % PAGE_BYTES) // tensor.element_size()
    aligned = raw.narrow(0, offset, count).view(tensor.shape)
    aligned.copy_(tensor)
    _pinned_storages[raw.storage().data_ptr()] = raw.storage()
    return aligned


def _is_pinned(tensor):
    """Whether the tensor lives in a buffer pin_memory made, as CUDA's is_pinned says of a
    page-locked allocation (a view into one included). The swapper writes "pinned" tensors
    straight from where they are and copies the others through its own buffers; with none
    pinned, 0.14.5's swap-out waits on no write and fails (`_num_pending_ops > 0`)."""
    return tensor.device.type == "cpu" and tensor.storage().data_ptr() in _pinned_storages


# Storage address -> the storage, kept alive so that an address is never reused while listed.
_pinned_storages = {}
_accelerator.pin_memory = _pin_memory_page_aligned
_accelerator.is_pinned = _is_pinned
# `deepspeed.ops.op_builder` resolved its AsyncIOBuilder name when DeepSpeed was imported, and
# the swappers imported that name: each module that holds the refusing builder under the name
# gets the generic one.
rebound = []
for _name, _module in list(sys.modules.items()):
    if _name.startswith(("deepspeed", "op_builder")) and getattr(_module, "AsyncIOBuilder", None) is _refusing_builder:
        _module.AsyncIOBuilder = AsyncIOBuilder
        rebound.append(_name)
if not any(name.endswith("partitioned_optimizer_swapper") for name in rebound):
    raise RuntimeError(f"cpu_aio: the optimizer swapper's AsyncIOBuilder was not found to rebind (rebound: {rebound})")
