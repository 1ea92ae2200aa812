"""The safetensors format, read and written in plain Python, for a machine without the
`safetensors` package (Debian 12 carries none): what scripts/deepspeed_live and
scripts/torch_reference use of it, `safe_open(path, framework="np"|"pt")` with `keys`,
`get_tensor` and `metadata`, and `safetensors.torch.load_file` / `save_file`.

The format: an unsigned 64-bit little-endian header length N, N bytes of JSON (each tensor's
"dtype", "shape" and "data_offsets" [begin, end) into the data that follows; "__metadata__"
a map of strings), then the tensors' bytes, little-endian, row-major. A file whose offsets do
not tile its data, or whose header is not that, is refused by name.
"""

import json
import struct

import numpy as np

# safetensors dtype -> (numpy dtype, bytes per element); BF16 is read as its 16 bits and
# widened by the torch reader (numpy has no bfloat16).
DTYPES = {
    "F64": (np.float64, 8), "F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.int16, 2),
    "I64": (np.int64, 8), "I32": (np.int32, 4), "I16": (np.int16, 2), "I8": (np.int8, 1),
    "U8": (np.uint8, 1), "BOOL": (np.bool_, 1),
}


class SafetensorsError(ValueError):
    pass


def read_header(path):
    """(header without __metadata__, metadata, the file's bytes, where the data starts)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SafetensorsError(f"{path}: {len(blob)} bytes, shorter than the 8-byte header length")
    (length,) = struct.unpack("<Q", blob[:8])
    if length > len(blob) - 8:
        raise SafetensorsError(f"{path}: header length {length} exceeds the file's {len(blob) - 8} bytes after it")
    try:
        header = json.loads(blob[8:8 + length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SafetensorsError(f"{path}: header is not JSON: {error}") from error
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise SafetensorsError(f"{path}: __metadata__ is not a map of strings to strings")
    start = 8 + length
    data_bytes = len(blob) - start
    spans = []
    for name, entry in header.items():
        if not isinstance(entry, dict):
            raise SafetensorsError(f"{path}: tensor {name}: its header entry is not an object")
        shape = entry.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise SafetensorsError(f"{path}: tensor {name}: shape {shape!r} is not a list of non-negative integers")
        dtype = entry.get("dtype")
        if dtype not in DTYPES:
            raise SafetensorsError(f"{path}: tensor {name}: dtype {dtype!r} is not one this reader knows")
        begin, end = entry.get("data_offsets", (None, None))
        count = 1
        for dimension in shape:  # Python integers: no overflow
            count *= dimension
        if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end <= data_bytes):
            raise SafetensorsError(f"{path}: tensor {name}: data_offsets {entry.get('data_offsets')} "
                                   f"outside the {data_bytes} data bytes")
        if end - begin != count * DTYPES[dtype][1]:
            raise SafetensorsError(f"{path}: tensor {name}: {end - begin} bytes for {count} {dtype} elements")
        spans.append((begin, end))
    position = 0
    for begin, end in sorted(spans):
        if begin != position:
            raise SafetensorsError(f"{path}: the tensors' bytes do not tile the data (a gap or overlap at byte "
                                   f"{position})")
        position = end
    if position != data_bytes:
        raise SafetensorsError(f"{path}: {data_bytes - position} data bytes after the last tensor")
    return header, metadata, blob, start


def numpy_tensor(header, blob, start, name):
    entry = header[name]
    dtype, _ = DTYPES[entry["dtype"]]
    begin, end = entry["data_offsets"]
    array = np.frombuffer(blob, dtype=np.dtype(dtype).newbyteorder("<"), count=(end - begin) // np.dtype(dtype).itemsize,
                          offset=start + begin)
    return array.reshape(entry["shape"]).astype(np.dtype(dtype).newbyteorder("="), copy=True)


class safe_open:  # noqa: N801 (the package's own name)
    def __init__(self, path, framework="np", device="cpu"):
        if framework not in ("np", "numpy", "pt"):
            raise SafetensorsError(f"{path}: framework {framework!r}: this reader gives np or pt")
        if device != "cpu":
            raise SafetensorsError(f"{path}: device {device!r}: this reader loads onto the cpu only")
        self._path = path
        self._framework = framework
        self._header, self._metadata, self._blob, self._start = read_header(path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        return list(self._header.keys())

    def metadata(self):
        return dict(self._metadata)

    def get_tensor(self, name):
        if name not in self._header:
            raise SafetensorsError(f"{self._path}: no tensor {name!r}")
        array = numpy_tensor(self._header, self._blob, self._start, name)
        if self._framework == "pt":
            from .torch import to_torch
            return to_torch(array, self._header[name]["dtype"])
        if self._header[name]["dtype"] == "BF16":
            raise SafetensorsError(f"{self._path}: tensor {name} is BF16, which numpy has no type for: use framework='pt'")
        return array
