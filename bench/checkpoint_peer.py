#!/usr/bin/env python3
"""The peers of zerosim's checkpoint save and load (bench/checkpoint_vs_dcp.sh runs both).

Same state size and layout as checkpoint_bench: 14 bytes per element (a 16-bit parameter and
fp32 master, exp_avg, exp_avg_sq), split into tensors of at most 4 M elements, the total
divided over the ranks (run it under torchrun for W > 1: each rank saves its share, gloo).
Durable writes (DCP's sync_files, fsync after torch.save, dd's conv=fsync), the page cache
dropped before every load and settled before every series of writes, as checkpoint_bench
does. Each figure is the median of R repetitions, in MB/s (1e6 bytes) of the state's bytes,
timed from a barrier to the last rank's return. Measures:

  dcp save / load     torch.distributed.checkpoint.save / load, FileSystemWriter with
                      --threads writer threads and sync_files, loading into fresh tensors
  dcp async stall     how long the caller waits in dcp.async_save (the snapshot to host
                      memory), and how long until its future completes
  torch.save / load   one file per rank, fsynced; torch.load of it (rank 0's file, W = 1 only)
  dd O_DIRECT         one file per rank of the same size: write with oflag=direct conv=fsync,
                      read with iflag=direct, 8 MiB blocks

--measures picks some of them (dcp, dcp_async, torch.save, torch.load, dd; all by default;
dcp.save is DCP's save alone, checkpoint_vs_dcp.sh's paired saves: checkpoint_bench --peer-save
runs it beside each of its saves, with --settle-seconds 0: the page cache dropped, no wait);
torch.load alone loads the files an earlier --measures torch.save --keep run left in --dir
(checkpoint_vs_dcp.sh's paired loads: checkpoint_bench --peer-load runs it beside each of its
loads), all R of them, or with --load-index I the I-th alone (from 0), so that each paired load
reads a file no load has read before. --keep leaves the files.

Output: one JSON line per measure.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

ELEMENTS_PER_TENSOR = 4 << 20
MEASURES = ("dcp", "dcp.save", "dcp_async", "torch.save", "torch.load", "dd")


def rank_and_world():
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def barrier():
    if dist.is_initialized():
        dist.barrier()


def drop_caches():
    """Whether the page cache could be dropped (needs root)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as control:
            control.write("3\n")
        return True
    except OSError:
        return False


def make_state(total_elements, rank, fresh):
    """The rank's tensors: param (fp16) and master/exp_avg/exp_avg_sq (fp32) per chunk. The
    names carry the rank: DCP's planner saves a plain tensor that every rank names alike once,
    as replicated, which would make W ranks write one rank's bytes."""
    state = {}
    generator = torch.Generator().manual_seed(1234 + rank)
    remaining, index = total_elements, 0
    while remaining > 0:
        count = min(ELEMENTS_PER_TENSOR, remaining)
        for name, dtype in (("param", torch.float16), ("master", torch.float32), ("exp_avg", torch.float32),
                            ("exp_avg_sq", torch.float32)):
            if fresh:
                state[f"rank{rank}.{name}.{index}"] = torch.empty(count, dtype=dtype)
            else:
                state[f"rank{rank}.{name}.{index}"] = torch.randn(count, generator=generator).to(dtype)
        remaining -= count
        index += 1
    return state


def timed(action):
    """Wall time from a barrier to every rank's return."""
    barrier()
    start = time.perf_counter()
    action()
    barrier()
    return time.perf_counter() - start


def report(measure, seconds, total_bytes, world_size, **extra):
    rank, _ = rank_and_world()
    if rank != 0:
        return
    median = statistics.median(seconds)
    line = {"engine": "peer", "measure": measure, "world_size": world_size, "bytes": total_bytes,
            "seconds": [round(s, 4) for s in seconds], "median_mb_per_s": round(total_bytes / median / 1e6, 1)}
    line.update(extra)
    print(json.dumps(line), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--state-mib", type=int, default=1024)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4, help="DCP FileSystemWriter thread_count")
    parser.add_argument("--settle-seconds", type=int, default=8)
    parser.add_argument("--measures", default=",".join(MEASURES),
                        help="comma-separated: " + ", ".join(MEASURES))
    parser.add_argument("--keep", action="store_true", help="leave the files in --dir")
    parser.add_argument("--load-index", type=int, default=None,
                        help="torch.load: only the file of this repetition (0 to --repetitions - 1)")
    args = parser.parse_args()
    if args.state_mib <= 0 or args.repetitions <= 0 or args.threads <= 0:
        parser.error("--state-mib, --repetitions and --threads must be positive")
    if args.settle_seconds < 0:
        parser.error("--settle-seconds must be 0 or more, got %d" % args.settle_seconds)
    measures = args.measures.split(",")
    if args.load_index is not None:
        if measures != ["torch.load"]:
            parser.error("--load-index goes with --measures torch.load alone, got --measures %s" % args.measures)
        if not 0 <= args.load_index < args.repetitions:
            parser.error("--load-index must be 0 to --repetitions - 1 (%d), got %d"
                         % (args.repetitions - 1, args.load_index))
    unknown = [m for m in measures if m not in MEASURES]
    if unknown or not args.measures:
        parser.error("--measures: unknown %s (known: %s)" % (unknown or "(empty)", ", ".join(MEASURES)))
    rank, world_size = rank_and_world()
    if world_size > 1:
        dist.init_process_group("gloo")
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    total_elements = args.state_mib * (1 << 20) // 14
    state = make_state(total_elements // world_size, rank, fresh=False)
    rank_bytes = sum(t.numel() * t.element_size() for t in state.values())
    total_bytes = rank_bytes * world_size
    os.makedirs(args.dir, exist_ok=True)
    dropped = True

    def settle():
        nonlocal dropped
        if rank == 0:
            dropped = drop_caches() and dropped
            time.sleep(args.settle_seconds)
        barrier()

    def cold():
        nonlocal dropped
        if rank == 0:
            dropped = drop_caches() and dropped
        barrier()

    if "dcp" in measures or "dcp.save" in measures:
        dcp_save_and_load(args, state, total_elements, rank, world_size, total_bytes, settle, cold,
                          load="dcp" in measures)
    if "dcp_async" in measures:
        dcp_async(args, state, total_bytes, world_size)
    if "torch.save" in measures or "torch.load" in measures:
        torch_save_and_load(args, state, rank, world_size, total_bytes, settle, cold, measures)
    if "dd" in measures:
        dd_write_and_read(args, rank, rank_bytes, world_size, settle, cold)

    barrier()
    if rank == 0:
        print(json.dumps({"engine": "peer", "torch": torch.__version__, "page_cache_dropped": dropped}), flush=True)
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    if dist.is_initialized():
        dist.destroy_process_group()


def dcp_save_and_load(args, state, total_elements, rank, world_size, total_bytes, settle, cold, load=True):
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
    paths = [os.path.join(args.dir, f"dcp-{r}") for r in range(args.repetitions)]
    settle()
    saves = [timed(lambda p=p: dcp.save(state, storage_writer=FileSystemWriter(p, thread_count=args.threads,
                                                                                sync_files=True)))
             for p in paths]
    report("dcp save", saves, total_bytes, world_size, threads=args.threads)
    if not load:
        return
    loads = []
    for p in paths:
        cold()
        target = {}

        def load(p=p, target=target):
            target.update(make_state(total_elements // world_size, rank, fresh=True))
            dcp.load(target, storage_reader=FileSystemReader(p))
        loads.append(timed(load))
        for name, tensor in target.items():
            if not torch.equal(tensor, state[name]):
                raise SystemExit(f"dcp load of {p}: {name} differs from what was saved")
    report("dcp load", loads, total_bytes, world_size)


def dcp_async(args, state, total_bytes, world_size):
    """DCP's async save: the caller's stall, and the time until the future completes."""
    from torch.distributed.checkpoint import FileSystemWriter
    if hasattr(dcp, "async_save"):
        stalls, completions = [], []
        for r in range(args.repetitions):
            path = os.path.join(args.dir, f"dcp-async-{r}")
            barrier()
            start = time.perf_counter()
            future = dcp.async_save(state, storage_writer=FileSystemWriter(path, thread_count=args.threads,
                                                                           sync_files=True))
            stalls.append(time.perf_counter() - start)
            future.result()
            barrier()
            completions.append(time.perf_counter() - start)
        report("dcp async_save stall", stalls, total_bytes, world_size,
               median_stall_ms=round(statistics.median(stalls) * 1e3, 1))
        report("dcp async_save complete", completions, total_bytes, world_size)


def torch_save_and_load(args, state, rank, world_size, total_bytes, settle, cold, measures):
    """torch.save / torch.load, one file per rank."""
    files = [os.path.join(args.dir, f"torch-{r}-rank{rank}.pt") for r in range(args.repetitions)]

    def torch_save(path):
        with open(path, "wb") as out:
            torch.save(state, out)
            out.flush()
            os.fsync(out.fileno())
    if "torch.save" in measures:
        settle()
        report("torch.save", [timed(lambda f=f: torch_save(f)) for f in files], total_bytes, world_size)
    if "torch.load" not in measures:
        return
    if args.load_index is not None:
        files = [files[args.load_index]]
    missing = [f for f in files if not os.path.isfile(f)]
    # Every rank learns whether any lacks its file: one rank leaving alone would hang the others.
    missing_anywhere = torch.tensor([len(missing)])
    if dist.is_initialized():
        dist.all_reduce(missing_anywhere, op=dist.ReduceOp.MAX)
    if int(missing_anywhere) > 0:
        what = missing[0] if missing else "another rank's file"
        raise SystemExit(f"torch.load: {what} is missing (write it first: --measures torch.save --keep, "
                         f"the same --dir, --state-mib, --repetitions and world size)")
    loads = []
    for f in files:
        cold()
        loads.append(timed(lambda f=f: torch.load(f, weights_only=True)))
    report("torch.load", loads, total_bytes, world_size)


def dd_write_and_read(args, rank, rank_bytes, world_size, settle, cold):
    """dd with O_DIRECT on the same size per rank."""
    block = 8 << 20
    blocks = (rank_bytes + block - 1) // block
    dd_files = [os.path.join(args.dir, f"dd-{r}-rank{rank}") for r in range(args.repetitions)]

    def dd(arguments):
        subprocess.run(["dd", *arguments, f"bs={block}", f"count={blocks}", "status=none"], check=True)
    settle()
    writes = [timed(lambda f=f: dd(["if=/dev/zero", f"of={f}", "oflag=direct", "conv=fsync"])) for f in dd_files]
    report("dd O_DIRECT write", writes, blocks * block * world_size, world_size)
    reads = []
    for f in dd_files:
        cold()
        reads.append(timed(lambda f=f: dd([f"if={f}", "of=/dev/null", "iflag=direct"])))
    report("dd O_DIRECT read", reads, blocks * block * world_size, world_size)


if __name__ == "__main__":
    main()
