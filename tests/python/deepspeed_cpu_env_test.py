"""What scripts/deepspeed_live/cpu_env supplies to run DeepSpeed on the CPU machine, held to what
it stands for: the safetensors reader and writer against files zerosim's C++ writer made and
against the format's rules, and torch_compat's collectives against the ones they replace
(computed directly) on two gloo ranks. Usage: deepspeed_cpu_env_test.py ZEROSIM_BINARY
"""

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CPU_ENV = os.path.join(HERE, "..", "..", "scripts", "deepspeed_live", "cpu_env")
sys.path.insert(0, CPU_ENV)

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from safetensors import SafetensorsError, safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def expect_refusal(path, fragment):
    try:
        load_file(path)
    except SafetensorsError as error:
        check(fragment in str(error), f"{path}: the refusal names {fragment!r}: {error}")
        return
    check(False, f"{path}: read without a refusal (expected one naming {fragment!r})")


def safetensors_cases(zerosim, directory):
    export = os.path.join(directory, "export")
    subprocess.run([zerosim, "train", "--model", "6,5,3", "--steps", "2", "--world-size", "1", "--precision", "bf16",
                    "--export-run", export], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(export, "run.json"), encoding="utf-8") as f:
        run = json.load(f)
    initial = load_file(os.path.join(export, "initial.safetensors"))
    check(sorted(initial) == sorted(run["parameters"]), f"the export's tensors {sorted(initial)} are the run's parameters")
    check(list(initial["layers.0.weight"].shape) == [5, 6] and initial["layers.0.weight"].dtype == torch.float32,
          "layers.0.weight is float32 [5, 6]")
    batches = load_file(os.path.join(export, "batches.safetensors"))
    rows = run["steps"] * run["train_batch_size"]
    check(list(batches["features"].shape) == [rows, 6], f"features hold {rows} rows of 6")
    # The export's initial weights sit on the bf16 grid (zerosim starts from 16-bit weights):
    # a reader that got the bytes wrong would not land there.
    weight = initial["layers.0.weight"]
    check(torch.equal(weight, weight.bfloat16().float()) and weight.abs().sum() > 0,
          "the initial weights read are nonzero values on the bf16 grid")

    tensors = {"a": torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7, "b": torch.tensor([1.5, -2.25]).bfloat16(),
               "c": torch.arange(5, dtype=torch.int64) - 2, "d": torch.zeros(0, dtype=torch.float16)}
    path = os.path.join(directory, "round.safetensors")
    save_file(tensors, path, metadata={"scalars": "{\"x\": 1}"})
    back = load_file(path)
    for name, tensor in tensors.items():
        check(back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), f"{name} comes back as written")
    with safe_open(path, framework="np") as f:
        check(f.metadata() == {"scalars": "{\"x\": 1}"}, "the metadata comes back")
        check((f.get_tensor("a") == tensors["a"].numpy()).all(), "np reads a as written")
    with open(path, "rb") as f:
        blob = f.read()
    (length,) = struct.unpack("<Q", blob[:8])
    check((8 + length) % 8 == 0, "the data starts 8-byte aligned")

    truncated = os.path.join(directory, "truncated.safetensors")
    with open(truncated, "wb") as f:
        f.write(blob[:-3])
    expect_refusal(truncated, "data_offsets")
    header = json.loads(blob[8:8 + length])
    header["c"]["data_offsets"] = [header["a"]["data_offsets"][0], header["a"]["data_offsets"][0] + 40]
    overlapping = os.path.join(directory, "overlap.safetensors")
    text = json.dumps(header).encode()
    with open(overlapping, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob[8 + length:])
    expect_refusal(overlapping, "tile")
    short = os.path.join(directory, "short.safetensors")
    with open(short, "wb") as f:
        f.write(b"\x01\x02")
    expect_refusal(short, "8-byte header length")
    trailing = os.path.join(directory, "trailing.safetensors")
    with open(trailing, "wb") as f:
        f.write(blob + b"\x00" * 4)
    expect_refusal(trailing, "after the last tensor")

    def rewritten(name, change):
        edited = json.loads(blob[8:8 + length])
        change(edited)
        text = json.dumps(edited).encode()
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + blob[8 + length:])
        return path

    def gap(edited):  # a's bytes moved one element on: a gap before it, an overlap after
        begin, end = edited["a"]["data_offsets"]
        edited["a"]["data_offsets"] = [begin + 4, end + 4]
    expect_refusal(rewritten("gap.safetensors", gap), "tile")
    expect_refusal(rewritten("dtype.safetensors", lambda e: e["a"].update(dtype="F8_E4M3")), "F8_E4M3")
    expect_refusal(rewritten("shape.safetensors", lambda e: e["a"].update(shape=[-3, -4])), "non-negative")
    expect_refusal(rewritten("count.safetensors", lambda e: e["a"].update(shape=[4, 4])), "16 F32 elements")
    expect_refusal(rewritten("metadata.safetensors", lambda e: e["__metadata__"].update(x=1)), "strings to strings")


def values(rank):
    # Sums that bf16 cannot hold exactly (1 + 2^-9 + 2^-8 rounds), so the rounding is exercised.
    return torch.arange(6, dtype=torch.float32) * (1 + 2.0 ** -7) + 10 * rank + 1 + 2.0 ** -8 * (rank + 1)


def collective_rank(rank, world, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch_compat  # noqa: F401 (before anything uses the collectives)
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=world)
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        mine = values(rank).to(dtype)
        gathered = torch.empty(6 * world, dtype=dtype)
        dist.all_gather_into_tensor(gathered, mine)
        out[f"gather-{dtype}"] = gathered.float().tolist()
        stacked = torch.empty(world, 6, dtype=dtype)
        dist._all_gather_base(stacked, mine, async_op=True).wait()
        out[f"gather-stacked-{dtype}"] = stacked.reshape(-1).float().tolist()
        summed = mine.clone()
        dist.all_reduce(summed)
        out[f"reduce-{dtype}"] = summed.float().tolist()
        scattered = torch.empty(3, dtype=dtype)
        work = dist.reduce_scatter_tensor(scattered, mine, async_op=True)
        work.wait()
        out[f"scatter-{dtype}"] = scattered.float().tolist()
        sent = mine.clone() if rank == 1 else torch.zeros(6, dtype=dtype)
        dist.broadcast(sent, src=1)
        out[f"broadcast-{dtype}"] = sent.float().tolist()
    results[rank] = out
    dist.destroy_process_group()


def collective_cases():
    world = 2
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(collective_rank, args=(world, port, results), nprocs=world, join=True)
    for dtype in (torch.float32, torch.bfloat16):
        parts = [values(r).to(dtype) for r in range(world)]
        gathered = torch.cat(parts).float().tolist()
        total = sum(p.float() for p in parts).to(dtype).float()
        for rank in range(world):
            got = results[rank]
            check(got[f"gather-{dtype}"] == gathered, f"rank {rank}: all_gather_into_tensor {dtype} in rank order")
            check(got[f"gather-stacked-{dtype}"] == gathered,
                  f"rank {rank}: _all_gather_base {dtype}, asynchronous, into a [W, N] output")
            check(got[f"reduce-{dtype}"] == total.tolist(), f"rank {rank}: all_reduce {dtype}")
            check(got[f"scatter-{dtype}"] == total[3 * rank:3 * rank + 3].tolist(),
                  f"rank {rank}: reduce_scatter_tensor {dtype} gives its chunk of the sum")
            check(got[f"broadcast-{dtype}"] == parts[1].float().tolist(), f"rank {rank}: broadcast {dtype} from rank 1")


def main():
    if len(sys.argv) != 2 or not os.access(sys.argv[1], os.X_OK):
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as directory:
        safetensors_cases(sys.argv[1], directory)
    collective_cases()
    if failures:
        print(f"{len(failures)} check(s) failed; replay: {sys.executable} {' '.join(sys.argv)}")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
