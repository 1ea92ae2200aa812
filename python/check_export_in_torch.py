"""Loads `zerosim ckpt export` files with the real safetensors and torch, as a user would.

    python3 python/check_export_in_torch.py --model 64,300,10 FP32_FILE BF16_FILE FP16_FILE

Checks, exiting 1 on the first failure: every file opens with safetensors.safe_open and
safetensors.torch.load_file; its metadata names the checkpoint; the fp32 tensors load with
load_state_dict(strict=True) into the MLP as PyTorch writes it (nn.ModuleList of nn.Linear,
names layers.<i>.weight / layers.<i>.bias) and run a forward pass; and the bf16 and fp16 files
hold, bit for bit, torch's own rounding of the fp32 tensors (Tensor.to, round to nearest even).
"""
import argparse
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file


class Mlp(torch.nn.Module):
    def __init__(self, widths):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.relu(x)
        return x


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("fp32")
    parser.add_argument("bf16")
    parser.add_argument("fp16")
    args = parser.parse_args()
    widths = [int(w) for w in args.model.split(",")]
    failures = []
    tensors = {}
    for path, dtype in ((args.fp32, torch.float32), (args.bf16, torch.bfloat16), (args.fp16, torch.float16)):
        with safe_open(path, framework="pt") as handle:
            metadata = handle.metadata()
            names = list(handle.keys())
        loaded = load_file(path)
        if metadata.get("format") != "pt" or "zerosim_checkpoint" not in metadata:
            failures.append(f"{path}: metadata {metadata}")
        if any(t.dtype != dtype for t in loaded.values()):
            failures.append(f"{path}: dtypes {set(t.dtype for t in loaded.values())}, expected {dtype}")
        tensors[dtype] = loaded
        print(f"{path}: {len(names)} tensors, metadata {metadata}")
    model = Mlp(widths)
    result = model.load_state_dict(tensors[torch.float32], strict=True)
    print(f"load_state_dict(strict=True): {result}")
    out = model(torch.randn(3, widths[0]))
    print(f"forward: output shape {tuple(out.shape)}, finite {bool(torch.isfinite(out).all())}")
    for dtype, view in ((torch.bfloat16, torch.int16), (torch.float16, torch.int16)):
        for name, full in tensors[torch.float32].items():
            expected = full.to(dtype).view(view)
            actual = tensors[dtype][name].view(view)
            differing = int((expected != actual).sum())
            if differing:
                failures.append(f"{name} as {dtype}: {differing} of {full.numel()} elements differ from torch's rounding")
        print(f"{dtype}: every element equals torch's rounding of the fp32 file" if not failures else f"{dtype}: checked")
    print(f"torch {torch.__version__}")
    for failure in failures:
        print("FAIL", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
