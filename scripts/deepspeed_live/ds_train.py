#!/usr/bin/env python3
"""Trains a zerosim --export-run with DeepSpeed's own engine (ZeRO-3), one process per rank.

The model is the run's MLP (Linear layers, ReLU between them) returning its fp32 cross-entropy
loss, built from the run's initial fp32 weights; the batches are the run's, in its global order.
DeepSpeed gets the given config (the seed's, say) with its "auto" values filled from run.json as
the Hugging Face Trainer fills them, and the offload device and NVMe path given here.

Three ways to run it, each writing OUT_DIR/records.json (one line per step: loss, lr, loss scale,
skipped, grad norm) and state files (every fp32 master, exp_avg and exp_avg_sq DeepSpeed hands
out through safe_get_full_*, with the counters and the loss scaler in their metadata):
  uninterrupted   steps 1..N; --capture-at K[,K...] also writes the state after each step K
                  (state-K)
  --save-at K     steps 1..K, engine.save_checkpoint(CKPT, tag=global_stepK), exit; --save-also J
                  (J < K) saves the tag global_stepJ on the way (a checkpoint directory with two
                  tags, `latest` naming the second)
  --resume CKPT   engine.load_checkpoint(CKPT) in a new process (state-loaded: right after the
                  load), then on from the engine's global_steps to N (state-final)
  --save-every S --ckpt CKPT
                  the program zerosim exec runs: it loads CKPT's newest tag when CKPT/latest
                  exists, trains on to N saving every S steps, and writes zerosim's state log
                  (ZEROSIM_STATE_LOG, through zerosim_state): per step the loss and digests of
                  the masters, moments, counters, lr, scheduler and loss scaler, the line after a
                  save written once the save returned, with "checkpoint": true. "{pid}" in OUT_DIR
                  and --nvme-path becomes the process id (resumes run side by side).

Ranks: one process by default; a launcher that sets RANK and WORLD_SIZE (and MASTER_PORT) in each
of W processes runs W ranks, each writing OUT_DIR/rank{R}. The export's world size must be W,
except for a resume (--resume), which may ask a checkpoint of another world size to load: after
such a load rank r trains on the export's rows of rank r modulo the export's world size (the
point is the load). With more than one rank the states hold each rank's partition (flat, without
ZeRO's padding), not whole parameters.

--data engine-loader gives DeepSpeed the export's rows as a Dataset (features, labels, the row's
index) through deepspeed.initialize(training_data=...), and the loop iterates the engine's own
loader from its start, in every process, as a plain loop does (records name each step's rows).
The states also carry a digest of torch's default generator; --save-at writes the checkpoint's
top-level keys (checkpoint-keys.json).

Usage: ds_train.py EXPORT_DIR CONFIG OUT_DIR --offload nvme|cpu|none [--nvme-path DIR]
                   [--capture-at K[,K...]] [--save-at K [--save-also J] --ckpt DIR | --save-every S --ckpt DIR]
                   [--resume DIR [--tag T]
                   [--load-optimizer-states 0|1] [--load-lr-scheduler-states 0|1]
                   [--load-module-only 0|1]] [--data export|engine-loader] [--set KEY=JSON ...]
"""

import argparse
import hashlib
import json
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
sys.dont_write_bytecode = True

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch_reference"))
from train_like_deepspeed import Run, folded_loss  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export_dir")
    parser.add_argument("config", help="a DeepSpeed config (JSON); its \"auto\" values are filled from the run")
    parser.add_argument("out_dir")
    parser.add_argument("--offload", choices=("nvme", "cpu", "none"), required=True)
    parser.add_argument("--nvme-path", default="")
    parser.add_argument("--capture-at", default="", help="steps after which the state is written, K[,K...]")
    parser.add_argument("--save-at", type=int, default=0)
    parser.add_argument("--save-also", type=int, default=0)
    parser.add_argument("--save-every", type=int, default=0)
    parser.add_argument("--ckpt", default="")
    parser.add_argument("--resume", default="")
    parser.add_argument("--tag", default=None)
    parser.add_argument("--load-optimizer-states", type=int, choices=(0, 1), default=1)
    parser.add_argument("--load-lr-scheduler-states", type=int, choices=(0, 1), default=1)
    parser.add_argument("--load-module-only", type=int, choices=(0, 1), default=0)
    parser.add_argument("--data", choices=("export", "engine-loader"), default="export")
    parser.add_argument("--set", action="append", default=[], help="KEY=JSON, a dotted path into the config")
    args = parser.parse_args()
    if args.offload == "nvme" and not args.nvme_path:
        parser.error("--offload nvme needs --nvme-path")
    if (args.save_at or args.save_every) and not args.ckpt:
        parser.error("--save-at and --save-every need --ckpt")
    if args.save_every < 0 or (args.save_every and (args.save_at or args.resume)):
        parser.error("--save-every takes a positive step count, without --save-at or --resume")
    try:
        args.capture_at = {int(k) for k in args.capture_at.split(",")} if args.capture_at else set()
    except ValueError:
        parser.error(f"--capture-at {args.capture_at!r}: steps K[,K...], each a positive integer")
    if any(k <= 0 for k in args.capture_at):
        parser.error(f"--capture-at {sorted(args.capture_at)}: each step must be positive")
    args.out_dir = args.out_dir.replace("{pid}", str(os.getpid()))
    args.nvme_path = args.nvme_path.replace("{pid}", str(os.getpid()))
    if args.save_at and args.resume:
        parser.error("--save-at and --resume exclude each other")
    if args.save_also and not 0 < args.save_also < args.save_at:
        parser.error(f"--save-also {args.save_also}: a step before --save-at's ({args.save_at})")
    return args


def fill_config(path, run, args, world_size):
    """The config with every "auto" filled from run.json, as the HF Trainer's DeepSpeed
    integration fills it (hidden size: the widest layer)."""
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    c = run.config
    hidden = max(run.widths)
    precision = run.precision
    fills = {
        "fp16.enabled": precision == "fp16",
        "bf16.enabled": precision == "bf16",
        "optimizer.params.lr": c["optimizer"]["lr"],
        "optimizer.params.betas": c["optimizer"]["betas"],
        "optimizer.params.eps": c["optimizer"]["eps"],
        "optimizer.params.weight_decay": c["optimizer"]["weight_decay"],
        "gradient_accumulation_steps": run.accumulation,
        "gradient_clipping": c["gradient_clipping"],
        "train_batch_size": run.micro_batch * run.accumulation * world_size,
        "train_micro_batch_size_per_gpu": run.micro_batch,
        "zero_optimization.reduce_bucket_size": hidden * hidden,
        "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
        "zero_optimization.stage3_param_persistence_threshold": 10 * hidden,
    }
    if c.get("scheduler"):
        for key, value in c["scheduler"].get("params", {}).items():
            fills[f"scheduler.params.{key}"] = value

    def walk(node, prefix):
        for key, value in list(node.items()):
            dotted = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(value, dotted + ".")
            elif value == "auto":
                if dotted not in fills:
                    sys.exit(f"error: {path}: {dotted} is \"auto\" and the run has no value for it")
                node[key] = fills[dotted]

    walk(config, "")
    # The run's fp16 scaler settings and scheduler win over the file's: the point is the same run.
    if precision == "fp16":
        config.setdefault("fp16", {}).update({k: c["fp16"][k] for k in ("loss_scale", "initial_scale_power",
                                                                          "loss_scale_window", "hysteresis",
                                                                          "min_loss_scale")})
        config["fp16"]["enabled"] = True
        config.setdefault("bf16", {})["enabled"] = False
    elif precision == "bf16":
        config.setdefault("fp16", {})["enabled"] = False
        config.setdefault("bf16", {})["enabled"] = True
    if c.get("scheduler"):
        config["scheduler"] = {"type": c["scheduler"]["type"], "params": dict(c["scheduler"]["params"])}
    zero = config.setdefault("zero_optimization", {})
    if args.offload == "none":
        zero.pop("offload_optimizer", None)
    else:
        offload = zero.setdefault("offload_optimizer", {})
        offload["device"] = args.offload
        if args.offload == "nvme":
            offload["nvme_path"] = args.nvme_path
        else:
            offload.pop("nvme_path", None)
    for item in args.set:
        key, _, text = item.partition("=")
        if not key or not text:
            sys.exit(f"error: --set {item!r}: expected KEY=JSON")
        node = config
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = json.loads(text)
    config["steps_per_print"] = 10**9
    return config


class MLP(torch.nn.Module):
    """The run's MLP; forward returns the fp32 mean cross-entropy (a module that computes its
    own loss, as a Hugging Face model does: where zerosim puts DeepSpeed's 1/G)."""

    def __init__(self, run):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(run.widths[i], run.widths[i + 1]) for i in range(run.layers))
        with torch.no_grad():
            for index, tensor in enumerate(run.initial):
                layer = self.layers[index // 2]
                (layer.weight if index % 2 == 0 else layer.bias).copy_(tensor)

    def forward(self, x, labels):
        h = x.to(self.layers[0].weight.dtype)
        for index, layer in enumerate(self.layers):
            h = layer(h)
            if index + 1 < len(self.layers):
                h = F.relu(h)
        return F.cross_entropy(h.float(), labels)


def partition_elements(param, partition_numel):
    """How many of this rank's `partition_numel` elements are the parameter's: the last ranks'
    partitions end in padding, which DeepSpeed leaves uninitialised (torch.empty)."""
    rank = torch.distributed.get_rank()
    return max(0, min(partition_numel, param.ds_numel - rank * partition_numel))


def partition_states(engine, param, whole):
    """The fp32 master, exp_avg and exp_avg_sq of one parameter's partition at this rank, and the
    16-bit parameter the next forward computes with (param16, widened to fp32 exactly), shaped
    as the parameter when `whole` (one rank: the partition is the whole parameter). DeepSpeed's
    safe_get_full_fp32_param reads the fp32 states, but in 0.14.5 it
    fails on a sub-group swapped to NVMe (it calls _optimizer_states_and_gradient_swap_in
    without its timer_names argument: a TypeError); so the same reads are made here, through
    the optimizer's own swap-in and swap-out."""
    optimizer = engine.optimizer
    group, offset, partition_numel = optimizer.grad_position[optimizer.get_param_id(param)]
    count = partition_elements(param, partition_numel)
    swapped = optimizer._swappable_optimizer_subgroup(group)
    if swapped:
        optimizer._optimizer_states_and_gradient_swap_in(group, set())
    flat = optimizer.fp32_partitioned_groups_flat[group]
    state = optimizer.optimizer.state.get(flat, {})
    shape = param.ds_shape if whole else (count,)
    result = {"master": flat.narrow(0, offset, count).detach().float().cpu().clone().view(shape)}
    for key in ("exp_avg", "exp_avg_sq"):
        # A step never taken leaves no moment: zeros, as zerosim writes them.
        result[key] = (state[key].narrow(0, offset, count).detach().float().cpu().clone().view(shape)
                       if key in state else torch.zeros(shape))
    if swapped:
        optimizer._optimizer_states_and_gradient_swap_out(group, set())
    result["param16"] = param.ds_tensor.detach().narrow(0, 0, count).float().cpu().clone().view(shape)
    return result


def rng_digest():
    """torch's default generator, as a digest of its state bytes."""
    return hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest()[:16]


def engine_state(engine, model, run):
    """Every fp32 master and moment, by the run's names, and the counters and scalers."""
    whole = torch.distributed.get_world_size() == 1
    tensors = {}
    for index, (name, param) in enumerate(model.named_parameters()):
        expected = run.names[index]
        if name != expected:
            sys.exit(f"error: the module's parameter {index} is {name}, the run's {expected}")
        for key, tensor in partition_states(engine, param, whole).items():
            tensors[f"{key}/{name}"] = tensor.contiguous()
    optimizer = engine.optimizer
    inner = getattr(optimizer, "optimizer", None)
    steps = sorted({int(s["step"]) for s in inner.state.values() if "step" in s}) if inner is not None else []
    scaler = getattr(optimizer, "loss_scaler", None)
    scalars = {
        "global_steps": int(engine.global_steps),
        "global_samples": int(engine.global_samples),
        "skipped_steps": int(engine.skipped_steps),
        "optimizer_steps": steps,
        "lr": [float(g["lr"]) for g in engine.optimizer.param_groups],
        "scheduler_last_batch_iteration": getattr(engine.lr_scheduler, "last_batch_iteration", None),
        "loss_scale": float(getattr(scaler, "cur_scale", 0.0)) if scaler is not None else None,
        "scaler_cur_iter": getattr(scaler, "cur_iter", None),
        "scaler_last_overflow_iter": getattr(scaler, "last_overflow_iter", None),
        "scaler_cur_hysteresis": getattr(scaler, "cur_hysteresis", None),
        "torch_rng": rng_digest(),
        "rank": torch.distributed.get_rank(),
        "world_size": torch.distributed.get_world_size(),
    }
    return tensors, scalars


def state_components(engine, model, run, zerosim_state):
    """The state log's components: a digest per state, by name."""
    tensors, scalars = engine_state(engine, model, run)
    components = {}
    for kind in ("master", "exp_avg", "exp_avg_sq"):
        names = sorted(k for k in tensors if k.startswith(kind + "/"))
        components[kind] = zerosim_state.digest_bytes(*(tensors[n].numpy().tobytes() for n in names))
    components["counters"] = zerosim_state.digest_value(
        [scalars["global_steps"], scalars["global_samples"], scalars["skipped_steps"], scalars["optimizer_steps"]])
    components["lr"] = zerosim_state.digest_value(scalars["lr"])
    components["scheduler"] = zerosim_state.digest_value(scalars["scheduler_last_batch_iteration"])
    components["loss_scaler"] = zerosim_state.digest_value(
        [scalars["loss_scale"], scalars["scaler_cur_iter"], scalars["scaler_last_overflow_iter"],
         scalars["scaler_cur_hysteresis"]])
    return components


def write_state(engine, model, run, out_dir, label):
    try:
        tensors, scalars = engine_state(engine, model, run)
    except Exception as error:  # a state DeepSpeed cannot hand out is a finding, not the end of the run
        with open(os.path.join(out_dir, f"state-{label}.error"), "w", encoding="utf-8") as f:
            f.write(f"{type(error).__name__}: {error}\n")
        print(f"ds_train: state-{label}: unreadable: {type(error).__name__}: {error}", flush=True)
        return
    save_file(tensors, os.path.join(out_dir, f"state-{label}.safetensors"),
              metadata={"scalars": json.dumps(scalars)})
    print(f"ds_train: state-{label}: {json.dumps(scalars)}", flush=True)


def write_checkpoint_keys(tag_dir, out_dir):
    """The top-level keys of each file of a saved tag: what the checkpoint holds."""
    keys = {}
    for name in sorted(os.listdir(tag_dir)):
        if name.endswith(".pt"):
            state = torch.load(os.path.join(tag_dir, name), map_location="cpu", weights_only=False)
            # Each key with its value where that is a plain value (None says nothing was saved
            # there), else its type.
            keys[name] = ({key: value if isinstance(value, (bool, int, float, str, type(None))) else type(value).__name__
                           for key, value in sorted(state.items())} if isinstance(state, dict) else type(state).__name__)
    with open(os.path.join(out_dir, "checkpoint-keys.json"), "w", encoding="utf-8") as f:
        json.dump(keys, f, indent=1)


def main():
    args = parse_args()
    dump_seconds = int(os.environ.get("DS_TRAIN_DUMP_SECONDS", "0") or "0")
    if dump_seconds > 0:
        # A run that hangs (inside DeepSpeed) prints every thread's stack before it is ended.
        import faulthandler
        faulthandler.dump_traceback_later(dump_seconds, exit=False)
    if os.environ.get("DS_ACCELERATOR") == "cpu":
        # DeepSpeed's CPU accelerator on Debian's PyTorch 1.13: cpu-env.sh puts this on the path.
        import torch_compat  # noqa: F401
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    if os.environ.get("DS_ACCELERATOR") == "cpu" and args.offload == "nvme":
        import cpu_aio  # noqa: F401

    # PyTorch seeds its default generator differently in every process; from one seed, its
    # state (torch_rng in the states) says what a run did to it, so that a resumed process's can
    # be held against the saving one's.
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    if not os.environ.get("MASTER_PORT"):
        # A free port of this machine: processes run side by side (zerosim exec's resumes).
        import socket
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(probe.getsockname()[1])
    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    try:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except ValueError:
        sys.exit(f"error: RANK {os.environ['RANK']!r} and WORLD_SIZE {os.environ['WORLD_SIZE']!r} must be integers")
    if not 0 <= rank < world_size:
        sys.exit(f"error: RANK {rank} is not a rank of WORLD_SIZE {world_size}")
    # One process per rank on one machine: each its own device (the CPU accelerator counts
    # LOCAL_SIZE devices).
    os.environ.setdefault("LOCAL_RANK", str(rank))
    os.environ.setdefault("LOCAL_SIZE", str(world_size))
    if not os.environ["LOCAL_RANK"].isdigit():
        sys.exit(f"error: LOCAL_RANK {os.environ['LOCAL_RANK']!r} must be a non-negative integer")
    device = get_accelerator().device_name(int(os.environ["LOCAL_RANK"]))
    run = Run(args.export_dir, device)
    if run.world_size != world_size and not args.resume:
        sys.exit(f"error: the export has world size {run.world_size}, this launch {world_size}; only a resume "
                 f"(--resume) may run on another world size")
    if world_size > 1:
        args.out_dir = os.path.join(args.out_dir, f"rank{rank}")
    os.makedirs(args.out_dir, exist_ok=True)
    config = fill_config(args.config, run, args, world_size)
    with open(os.path.join(args.out_dir, "ds_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)
    # NCCL on the GPU; DS_DIST_BACKEND=gloo lets the script itself be tried on a CPU machine.
    deepspeed.init_distributed(dist_backend=os.environ.get("DS_DIST_BACKEND", "nccl"))
    model = MLP(run)
    training_data = None
    if args.data == "engine-loader":
        training_data = torch.utils.data.TensorDataset(run.features.cpu(), run.labels.cpu(),
                                                       torch.arange(run.features.shape[0]))
    engine, _, loader, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config,
                                                training_data=training_data)
    print(f"ds_train: DeepSpeed {deepspeed.__version__} ({deepspeed.git_version_info.git_hash}), torch "
          f"{torch.__version__}, {run.precision}, offload {args.offload}, optimizer "
          f"{type(engine.optimizer.optimizer).__name__}", flush=True)

    first_step = 0
    state_log = None
    if args.save_every:
        sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
        import zerosim_state
        state_log = zerosim_state.StateLog()
        if os.path.isfile(os.path.join(args.ckpt, "latest")):
            args.resume = args.ckpt
    if args.resume:
        path, client = engine.load_checkpoint(args.resume, tag=args.tag,
                                              load_optimizer_states=bool(args.load_optimizer_states),
                                              load_lr_scheduler_states=bool(args.load_lr_scheduler_states),
                                              load_module_only=bool(args.load_module_only))
        if path is None:
            sys.exit(f"error: load_checkpoint({args.resume}) found no checkpoint")
        print(f"ds_train: loaded {path}", flush=True)
        write_state(engine, model, run, args.out_dir, "loaded")
        # The data position from the engine's own counter, as a careful plain loop takes it
        # (with --data engine-loader the loop takes the loader as the engine hands it back).
        first_step = int(engine.global_steps)
    last_step = args.save_at if args.save_at else run.steps

    records = []
    batches = iter(loader) if loader is not None else None
    for step in range(first_step, last_step):
        lr = float(engine.get_lr()[0])
        scale = float(engine.optimizer.loss_scale) if run.precision == "fp16" else 1.0
        skipped_before = int(engine.skipped_steps)
        losses = []
        samples = []
        for k in range(run.accumulation):
            if batches is not None:
                features, labels, indices = next(batches)
                samples += indices.tolist()
                loss = engine(features.to(device), labels.to(device))
            else:
                rows = run.micro_batch_rows(step, k, rank % run.world_size)
                loss = engine(run.features[rows], run.labels[rows])
            engine.backward(loss)
            engine.step()
            losses.append(loss.detach().float())
        skipped = int(engine.skipped_steps) > skipped_before
        norm = engine.get_global_grad_norm()
        records.append({"step": step + 1, "loss": folded_loss(losses), "lr": lr, "loss_scale": scale,
                        "skipped": skipped, "grad_norm": -1.0 if skipped or norm is None else float(norm)})
        if batches is not None:
            records[-1]["samples"] = samples
        if args.save_also == step + 1:
            engine.save_checkpoint(args.ckpt, tag=f"global_step{step + 1}")
        if step + 1 in args.capture_at:
            write_state(engine, model, run, args.out_dir, f"{step + 1}")
        if state_log is not None:
            saved = (step + 1) % args.save_every == 0
            if saved:
                engine.save_checkpoint(args.ckpt, tag=f"global_step{step + 1}")
            state_log.step(step + 1, records[-1]["loss"], state_components(engine, model, run, zerosim_state),
                           checkpoint=saved)
    if args.save_at:
        engine.save_checkpoint(args.ckpt, tag=f"global_step{args.save_at}")
        write_state(engine, model, run, args.out_dir, f"{args.save_at}")
        write_checkpoint_keys(os.path.join(args.ckpt, f"global_step{args.save_at}"), args.out_dir)
    else:
        write_state(engine, model, run, args.out_dir, "final")
    with open(os.path.join(args.out_dir, "records.json"), "w", encoding="utf-8") as f:
        json.dump({"first_step": first_step + 1, "rank": rank, "world_size": world_size, "records": records}, f,
                  indent=1)
    print(f"ds_train: {len(records)} step(s) from step {first_step + 1}", flush=True)
    # Everything is written; the engine's exit (NCCL, the NVMe op's threads) has hung this
    # process at interpreter shutdown, so it ends here.
    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
