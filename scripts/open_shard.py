#!/usr/bin/env python3
# Opens a zerosim shard with the safetensors package (and PyTorch), prints every tensor and
# its global offset, and checks the param fragment equals the master rounded to fp16.
import json, sys
from safetensors import safe_open
import torch
path = sys.argv[1]
with safe_open(path, framework="pt") as shard:
    metadata = shard.metadata()
    print("metadata keys:", sorted(k for k in metadata if "/" not in k))
    for name in shard.keys():
        tensor = shard.get_tensor(name)
        fragment = json.loads(metadata[name])
        print(name, tensor.dtype, tuple(tensor.shape), "global_offset", fragment["global_offset"], "of", fragment["global_shape"])
    master = shard.get_tensor("layers.0.weight/master")
    param = shard.get_tensor("layers.0.weight/param")
    print("param == master.half():", torch.equal(param, master.half()))
