"""safetensors.torch's load_file and save_file over the plain reader (see the package)."""

import json
import struct

import numpy as np
import torch

from . import SafetensorsError, numpy_tensor, read_header

TORCH_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}


def to_torch(array, dtype):
    tensor = torch.from_numpy(array)
    return tensor.view(torch.bfloat16) if dtype == "BF16" else tensor


def load_file(path, device="cpu"):
    header, _, blob, start = read_header(path)
    return {name: to_torch(numpy_tensor(header, blob, start, name), header[name]["dtype"]).to(device)
            for name in header}


def save_file(tensors, path, metadata=None):
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        if tensor.dtype not in TORCH_DTYPES:
            raise SafetensorsError(f"{path}: tensor {name}: dtype {tensor.dtype} has no safetensors name here")
        wire = tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor
        data = np.ascontiguousarray(wire.numpy()).astype(wire.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": TORCH_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise SafetensorsError(f"{path}: metadata must map strings to strings")
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the package writes it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in chunks:
            f.write(data)
