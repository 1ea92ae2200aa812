"""What DeepSpeed 0.14.5 asks of PyTorch that Debian 12's PyTorch 1.13 lacks on the CPU (its
gloo backend's collectives, a C++ standard for the op builds), supplied from what that PyTorch
has, so that DeepSpeed's own engine runs unmodified on the CPU machine (docs/deepspeed-live.md,
"DeepSpeed on the CPU machine"). Imported before DeepSpeed.

- `all_gather_into_tensor` / `_all_gather_base` (gloo: "no support for _allgather_base"): an
  `all_gather` into the output's W equal chunks, which are views of it, so the bytes land where
  the one-tensor collective puts them.
- `reduce_scatter_tensor` / `_reduce_scatter_base` (gloo has no reduce-scatter): an
  `all_reduce` of a copy, then this rank's chunk copied out. Same sum, same chunk; the order
  in which gloo adds the ranks is gloo's, as it is for every all_reduce here.
- bf16 (gloo: "Invalid scalar type"): copies (broadcast, all_gather) carry its bytes as uint8;
  a sum (all_reduce, and so reduce-scatter) runs in fp32 and is rounded to bf16 once.
- DeepSpeed's CPU ops are C++17 (`std::is_same_v`) and PyTorch 1.13's extension builder passes
  -std=c++14: the builds get -std=c++17 after it (the last one counts).

No DeepSpeed source is touched: with one rank every collective is a copy, and with more the
results are the collectives' own. Not supplied (ZeRO-3's path does not call them): bf16 in the
list all_gather, reduce and all_reduce_coalesced.
"""

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.utils.cpp_extension as cpp_extension

_load = cpp_extension.load


def _load_cxx17(*args, **kwargs):
    kwargs["extra_cflags"] = list(kwargs.get("extra_cflags") or []) + ["-std=c++17"]
    return _load(*args, **kwargs)


cpp_extension.load = _load_cxx17


class _Done:
    """The handle of a collective that has already completed (run synchronously)."""

    def wait(self, *args, **kwargs):
        return True

    def is_completed(self):
        return True


def _bytes_if_bf16(tensor):
    if tensor.dtype != torch.bfloat16:
        return tensor
    if not tensor.is_contiguous():
        raise RuntimeError("torch_compat: a non-contiguous bf16 tensor cannot be carried as bytes")
    return tensor.view(torch.uint8)


_all_gather = dist.all_gather
_all_reduce = dist.all_reduce
_broadcast = dist.broadcast


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """The output, flat, in W equal chunks (the concatenated or the stacked [W, ...] form alike)."""
    world = dist.get_world_size(group)
    output = _bytes_if_bf16(output_tensor)
    source = _bytes_if_bf16(input_tensor.contiguous())
    if not output.is_contiguous() or output.numel() != world * source.numel():
        raise RuntimeError(f"torch_compat: all_gather_into_tensor: output of {output_tensor.numel()} elements "
                           f"is not {world} contiguous copies of the input's {input_tensor.numel()}")
    return _all_gather(list(output.view(-1).chunk(world)), source.view(-1), group=group, async_op=async_op)


def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    if tensor.dtype != torch.bfloat16:
        return _all_reduce(tensor, op=op, group=group, async_op=async_op)
    wide = tensor.float()
    _all_reduce(wide, op=op, group=group)
    tensor.copy_(wide)
    return _Done() if async_op else None


def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
    world = dist.get_world_size(group)
    if input.numel() != world * output.numel():
        raise RuntimeError(f"torch_compat: reduce_scatter_tensor: input of {input.numel()} elements is not "
                           f"{world} times the output's {output.numel()}")
    total = input.detach().clone(memory_format=torch.contiguous_format)
    all_reduce(total, op=op, group=group)
    output.copy_(total.view(-1).chunk(world)[dist.get_rank(group)].view_as(output))
    return _Done() if async_op else None


def broadcast(tensor, src, group=None, async_op=False):
    return _broadcast(_bytes_if_bf16(tensor), src, group=group, async_op=async_op)


for module in (dist, c10d):
    module.all_gather_into_tensor = all_gather_into_tensor
    module._all_gather_base = all_gather_into_tensor
    module.reduce_scatter_tensor = reduce_scatter_tensor
    module._reduce_scatter_base = reduce_scatter_tensor
    module.all_reduce = all_reduce
    module.broadcast = broadcast
