#!/usr/bin/env python3
"""Trains a zerosim --export-run with PyTorch the way DeepSpeed ZeRO-3 would, and compares.

The run is replayed with torch.optim.AdamW (torch.optim.Adam when adam_w_mode is off) in
place of DeepSpeedCPUAdam, DeepSpeed's own learning-rate schedule and loss scaler (its
deepspeed/runtime/lr_schedules.py and fp16/loss_scaler.py, loaded by file path from a plain
DeepSpeed source tree, on the real torch), and ZeRO-3's gradient path with the W ranks run
one after another in this process. The per-step loss, lr, loss scale, skip flag and gradient
norm, and the final master weights and Adam moments, are compared with zerosim's.

Usage: train_like_deepspeed.py EXPORT_DIR DEEPSPEED_SRC OUT_JSON [--device cuda|cpu]
                               [--module-output logits|loss]
"""

import argparse
import json
import math
import os
import platform
import sys

# Read by cuBLAS when its first handle is made: deterministic GEMM workspaces.
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
# Keeps __pycache__ out of the DeepSpeed tree and out of this repository.
sys.dont_write_bytecode = True

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deepspeed_golden"))
import dsgolden  # noqa: E402

MODEL_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
ULP_BINS = (("0", 0, 0), ("1", 1, 1), ("2-3", 2, 3), ("4-15", 4, 15), ("16-255", 16, 255), ("256+", 256, None))
STATE_COMPONENTS = ("master", "exp_avg", "exp_avg_sq")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export_dir", help="directory written by `zerosim train ... --export-run DIR`")
    parser.add_argument("deepspeed_src", help="plain DeepSpeed source tree (holds deepspeed/ and csrc/)")
    parser.add_argument("out_json", help="file to write")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--module-output",
                        choices=("loss", "logits"),
                        default="loss",
                        help="what the module given to DeepSpeed returns, so where the engine's 1/G backward "
                        "hook sits: the fp32 loss (the default: a Hugging Face model computes its loss inside "
                        "forward, and zerosim's engine divides there) or the logits in the model dtype (the "
                        "loss computed outside the module: the gradient is rounded to fp16 before the 1/G)")
    return parser.parse_args()


def load_deepspeed(src):
    """DeepSpeed's schedule and scaler modules, executed from `src` with stand-ins for what
    they import from DeepSpeed itself (torch is the real one)."""
    logger = dsgolden.capturing_logger()
    dsgolden.stub_module("deepspeed")
    dsgolden.stub_module("deepspeed.utils", logger=logger)
    # Rank 0 is the rank that logs the overflow messages.
    dsgolden.stub_module("deepspeed.comm", get_rank=lambda group=None: 0)
    dsgolden.stub_module("deepspeed.runtime")
    dsgolden.stub_module("deepspeed.runtime.fp16")
    dsgolden.stub_module("deepspeed.runtime.config_utils", DeepSpeedConfigObject=object)
    schedules = dsgolden.load_ds_module(src, "deepspeed/runtime/lr_schedules.py", "deepspeed.runtime.lr_schedules")
    scaler = dsgolden.load_ds_module(src, "deepspeed/runtime/fp16/loss_scaler.py",
                                     "deepspeed.runtime.fp16.loss_scaler")
    return schedules, scaler, logger


def integer_field(fp16, key):
    # DeepSpeedFP16Config declares these fields int: pydantic takes 1.0 as 1 and refuses 1.5.
    value = fp16[key]
    if isinstance(value, bool) or float(value) != int(value):
        sys.exit(f"error: fp16.{key} = {value!r}: DeepSpeed's fp16 config takes integers only")
    return int(value)


def build_loss_scaler(scaler_mod, fp16, model_dtype):
    """The scaler as ZeRO-3 gets it: DeepSpeedEngine passes static_loss_scale=fp16.loss_scale,
    dynamic_loss_scale=(loss_scale == 0) and DeepSpeedFP16Config.dynamic_loss_scale_args();
    DeepSpeedZeroOptimizer_Stage3 calls CreateLossScaler(dtype=<model dtype>, ...) with them.
    The config model is pydantic, which is not available here, so its coercions and its
    dynamic_loss_scale_args() dict are spelled out below, keyed by loss_scaler.py's names."""
    static_loss_scale = float(fp16["loss_scale"])
    dynamic_loss_args = {
        scaler_mod.INITIAL_LOSS_SCALE: 2**integer_field(fp16, "initial_scale_power"),
        scaler_mod.SCALE_WINDOW: integer_field(fp16, "loss_scale_window"),
        scaler_mod.DELAYED_SHIFT: integer_field(fp16, "hysteresis"),
        scaler_mod.CONSECUTIVE_HYSTERESIS: bool(fp16["consecutive_hysteresis"]),
        scaler_mod.MIN_LOSS_SCALE: integer_field(fp16, "min_loss_scale"),
    }
    return scaler_mod.CreateLossScaler(dtype=model_dtype,
                                       static_loss_scale=static_loss_scale,
                                       dynamic_scaling=static_loss_scale == 0,
                                       dynamic_loss_args=dynamic_loss_args)


def build_scheduler(schedules_mod, scheduler, optimizer):
    # DeepSpeedEngine._scheduler_from_config: the class by name, the params dict untouched.
    if scheduler is None:
        return None
    if not hasattr(schedules_mod, scheduler["type"]):
        sys.exit(f"error: DeepSpeed's lr_schedules.py has no scheduler {scheduler['type']!r}")
    return getattr(schedules_mod, scheduler["type"])(optimizer, **scheduler["params"])


def build_optimizer(masters, opt):
    if not opt["bias_correction"]:
        sys.exit("error: the run turns Adam's bias correction off; torch's Adam and AdamW always apply it")
    # adam_w_mode off is DeepSpeedCPUAdam's L2 mode: the decay added to the gradient, as torch's Adam does.
    optimizer_class = torch.optim.AdamW if opt["adam_w_mode"] else torch.optim.Adam
    return optimizer_class(masters,
                           lr=opt["lr"],
                           betas=tuple(opt["betas"]),
                           eps=opt["eps"],
                           weight_decay=opt["weight_decay"],
                           foreach=False,
                           fused=False)


class Run:
    """The exported run's settings, tensors and zerosim's records."""

    def __init__(self, export_dir, device):
        with open(os.path.join(export_dir, "run.json"), encoding="utf-8") as f:
            self.config = json.load(f)
        c = self.config
        self.widths = c["model"]
        self.layers = len(self.widths) - 1
        self.precision = c["precision"]
        if self.precision not in MODEL_DTYPES:
            sys.exit(f"error: unknown precision {self.precision!r}")
        if (self.precision == "fp16") != bool(c["fp16"]["enabled"]):
            sys.exit("error: run.json's precision and fp16.enabled disagree")
        self.model_dtype = MODEL_DTYPES[self.precision]
        self.world_size = c["world_size"]
        self.micro_batch = c["micro_batch_size"]
        self.accumulation = c["gradient_accumulation_steps"]
        self.train_batch = c["train_batch_size"]
        self.steps = c["steps"]
        if self.train_batch != self.micro_batch * self.accumulation * self.world_size:
            sys.exit("error: train_batch_size is not micro_batch_size * gradient_accumulation_steps * world_size")
        self.names = c["parameters"]
        expected = [f"layers.{l}.{kind}" for l in range(self.layers) for kind in ("weight", "bias")]
        if self.names != expected:
            sys.exit(f"error: parameters {self.names} are not the MLP's {expected}")

        initial = load_file(os.path.join(export_dir, "initial.safetensors"))
        self.initial = []
        for name in self.names:
            layer = int(name.split(".")[1])
            shape = [self.widths[layer + 1], self.widths[layer]] if name.endswith("weight") else [self.widths[layer + 1]]
            tensor = initial[name]
            if list(tensor.shape) != shape or tensor.dtype != torch.float32:
                sys.exit(f"error: initial {name} is {tensor.dtype} {list(tensor.shape)}, expected float32 {shape}")
            self.initial.append(tensor.to(device))

        batches = load_file(os.path.join(export_dir, "batches.safetensors"))
        rows = self.steps * self.train_batch
        self.features = batches["features"].to(device)
        labels = batches["labels"]
        if list(self.features.shape) != [rows, self.widths[0]] or list(labels.shape) != [rows]:
            sys.exit(f"error: batches hold features {list(self.features.shape)} and labels {list(labels.shape)}, "
                     f"expected [{rows}, {self.widths[0]}] and [{rows}]")
        self.labels = labels.long()
        if not torch.equal(self.labels.float(), labels) or self.labels.min() < 0 or self.labels.max() >= self.widths[-1]:
            sys.exit("error: labels are not class ids of the model's output")
        self.labels = self.labels.to(device)

        self.final = load_file(os.path.join(export_dir, "final.safetensors"))

    def micro_batch_rows(self, step, k, rank):
        # Global micro-batch m = k * W + r of the step, in sample-position order.
        first = step * self.train_batch + (k * self.world_size + rank) * self.micro_batch
        return slice(first, first + self.micro_batch)


def forward(run, weights, x):
    h = x
    for layer in range(run.layers):
        h = F.linear(h, weights[2 * layer], weights[2 * layer + 1])
        if layer + 1 < run.layers:
            h = F.relu(h)
    return h


def reduced_step_gradients(run, step, scaler, model, module_output):
    """ZeRO-3's gradient for one step, in the model dtype, and the G * W micro-batch losses.

    Per micro-step, every rank's backward is seeded with S (scaler.scale_loss) and the engine's
    hook on the module output (`module_output`: the fp16/bf16 logits, or the fp32 loss when
    the module computes it) divides by G; reduce_scatter_coalesced divides each rank's
    gradient by W in place (a Python int divisor, as there) and the ranks' contributions are
    summed (here in rank order); the micro-steps accumulate into the partition buffer
    (copied at micro-step 0, added after). All of it in the model dtype."""
    G, W = run.accumulation, run.world_size
    losses = []
    accumulated = None
    for k in range(G):
        reduced = None
        for rank in range(W):
            rows = run.micro_batch_rows(step, k, rank)
            logits = forward(run, model, run.features[rows].to(run.model_dtype))
            loss = F.cross_entropy(logits.float(), run.labels[rows])
            # DeepSpeedEngine._backward_prologue_per_tensor, hooked on what forward() returned.
            (logits if module_output == "logits" else loss).register_hook(lambda grad: grad / G)
            scaler.scale_loss(loss).backward()
            losses.append(loss.detach())
            contribution = []
            for p in model:
                contribution.append(p.grad.div_(W))
                p.grad = None
            if reduced is None:
                reduced = contribution
            else:
                for total, part in zip(reduced, contribution):
                    total.add_(part)
        if accumulated is None:
            accumulated = reduced
        else:
            for total, part in zip(accumulated, reduced):
                total.add_(part)
    return accumulated, losses


def folded_loss(losses):
    # zerosim folds the micro-batch losses in global micro-batch order in fp32: so does this.
    total = np.float32(0.0)
    for value in torch.stack(losses).cpu().numpy():
        total = np.float32(total + value)
    return float(np.float32(total / np.float32(len(losses))))


def train(run, masters, optimizer, scheduler, scaler, module_output):
    clip_norm = float(run.config["gradient_clipping"])
    records = []
    for step in range(run.steps):
        scale = scaler.loss_scale
        lr = optimizer.param_groups[0]["lr"]
        # The fp16/bf16 parameters ZeRO-3 gathers are the masters' casts; copy=True keeps an
        # fp32 run's gradients off the masters.
        model = [m.detach().to(run.model_dtype, copy=True).requires_grad_(True) for m in masters]
        accumulated, losses = reduced_step_gradients(run, step, scaler, model, module_output)

        overflow = run.precision == "fp16" and not all(bool(torch.isfinite(g).all()) for g in accumulated)
        # Stage 3 updates the scale before it unscales, so the unscale uses the new scale.
        try:
            scaler.update_scale(overflow)
        except Exception as e:  # DeepSpeed raises a bare Exception at the minimum scale
            sys.exit(f"error: step {step + 1}: DeepSpeed's loss scaler stopped the run: {e}")
        record = {"step": step + 1, "loss": folded_loss(losses), "lr": lr, "loss_scale": float(scale)}
        if overflow:
            records.append(dict(record, grad_norm=-1.0, skipped=True))
            continue

        new_scale = scaler.loss_scale
        grads = [g.float() for g in accumulated]
        # DeepSpeed sums the squares in fp64 and holds the norm as an fp32 tensor.
        square_sum = torch.stack([g.double().pow(2).sum() for g in grads]).sum()
        scaled_norm = square_sum.sqrt().float()
        # stage3.unscale_and_clip_grads, op for op.
        combined_scale = new_scale
        if clip_norm > 0.0:
            clip = ((scaled_norm / new_scale) + 1e-6) / clip_norm
            clip = torch.clamp(clip, min=1.0)
            combined_scale = clip * new_scale
        for master, grad in zip(masters, grads):
            master.grad = grad.mul_(1. / combined_scale)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        records.append(dict(record, grad_norm=float(scaled_norm / new_scale), skipped=False))
    return records


def ordered_bits(values):
    """fp32 values mapped to integers in the order of the floats (-0 and +0 both to 0)."""
    bits = values.view(np.uint32).astype(np.int64)
    return np.where(bits >= 0x80000000, 0x80000000 - bits, bits)


def compare_tensors(ours, theirs):
    ours = np.ascontiguousarray(ours, dtype=np.float32)
    theirs = np.ascontiguousarray(theirs, dtype=np.float32)
    ulp = np.abs(ordered_bits(ours) - ordered_bits(theirs))
    histogram = {}
    for label, low, high in ULP_BINS:
        inside = ulp >= low if high is None else (ulp >= low) & (ulp <= high)
        histogram[label] = int(np.count_nonzero(inside))
    a, b = ours.astype(np.float64), theirs.astype(np.float64)
    abs_diff = np.abs(a - b)
    magnitude = np.maximum(np.abs(a), np.abs(b))
    rel_diff = np.divide(abs_diff, magnitude, out=np.zeros_like(abs_diff), where=magnitude > 0)
    return {
        "elements": int(ours.size),
        "identical": bool(np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))),
        "ulp_histogram": histogram,
        "max_ulp": int(ulp.max()) if ulp.size else 0,
        "max_abs_diff": float(abs_diff.max()) if ulp.size else 0.0,
        "max_rel_diff": float(rel_diff.max()) if ulp.size else 0.0,
    }


def final_comparison(run, masters, optimizer):
    result = {}
    for component in STATE_COMPONENTS:
        ours, theirs = [], []
        for name, master in zip(run.names, masters):
            if component == "master":
                tensor = master
            else:
                # No applied step leaves torch's state empty; zerosim's moments are then zeros.
                tensor = optimizer.state[master].get(component, torch.zeros_like(master))
            ours.append(tensor.detach().cpu().numpy().ravel())
            theirs.append(run.final[f"{component}/{name}"].numpy().ravel())
        result[component] = compare_tensors(np.concatenate(ours), np.concatenate(theirs))
    return result


def relative_difference(a, b):
    # None where either side has no finite value (zerosim writes a NaN as null).
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return None
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


def per_step_comparison(ours, theirs):
    rows = []
    for o, t in zip(ours, theirs):
        compared_norms = not (o["skipped"] or t["skipped"])
        rows.append({
            "step": o["step"],
            "loss_torch": o["loss"],
            "loss_zerosim": t["loss"],
            "loss_rel_diff": relative_difference(o["loss"], t["loss"]),
            "lr_equal": o["lr"] == t["lr"],
            "lr_torch": o["lr"],
            "lr_zerosim": t["lr"],
            "scale_equal": o["loss_scale"] == t["loss_scale"],
            "skipped_equal": o["skipped"] == t["skipped"],
            "grad_norm_rel_diff": relative_difference(o["grad_norm"], t["grad_norm"]) if compared_norms else None,
        })
    return rows


def summarize(rows):

    def largest(key):
        values = [r[key] for r in rows if r[key] is not None]
        return max(values) if values else None

    return {
        "lr_all_equal": all(r["lr_equal"] for r in rows),
        "scale_all_equal": all(r["scale_equal"] for r in rows),
        "skipped_all_equal": all(r["skipped_equal"] for r in rows),
        "max_loss_rel_diff": largest("loss_rel_diff"),
        "max_grad_norm_rel_diff": largest("grad_norm_rel_diff"),
    }


def json_safe(obj):
    # Strict JSON has no NaN or infinity: those are written as the strings "nan", "inf", "-inf".
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def print_report(run, module_output, ours, theirs, rows, summary, final):

    def number(value, spec):
        return "-" if value is None else format(value, spec)

    def flag(same):
        return "=" if same else "!="

    print(f"model {run.widths}, {run.precision}, W={run.world_size}, G={run.accumulation}, "
          f"micro-batch {run.micro_batch}, {run.steps} steps, zerosim numerics {run.config['numerics']}, "
          f"1/G hook on the {module_output}")
    print(f"{'step':>5} {'loss torch':>13} {'loss zerosim':>13} {'loss rel':>9} {'lr':>3} {'scale':>12} "
          f"{'skip':>5} {'gnorm torch':>12} {'gnorm rel':>9}")
    for o, t, r in zip(ours, theirs, rows):
        print(f"{r['step']:>5} {number(o['loss'], '13.7g')} {number(t['loss'], '13.7g')} "
              f"{number(r['loss_rel_diff'], '9.2e')} {flag(r['lr_equal']):>3} "
              f"{o['loss_scale']:>10.10g}{flag(r['scale_equal']):>2} "
              f"{('yes' if o['skipped'] else 'no') + flag(r['skipped_equal']):>5} "
              f"{number(o['grad_norm'], '12.6g')} {number(r['grad_norm_rel_diff'], '9.2e')}")
    if len(ours) != len(theirs):
        print(f"warning: torch ran {len(ours)} steps, run.json records {len(theirs)}; compared {len(rows)}")
    print(f"lr all equal: {summary['lr_all_equal']}, loss scale all equal: {summary['scale_all_equal']}, "
          f"skips all equal: {summary['skipped_all_equal']}, max loss rel diff: "
          f"{number(summary['max_loss_rel_diff'], '.3e')}, max grad-norm rel diff: "
          f"{number(summary['max_grad_norm_rel_diff'], '.3e')}")
    print("final state, torch vs zerosim, ULP distance:")
    labels = [label for label, _, _ in ULP_BINS]
    print(f"{'':>11} {'elements':>9} " + " ".join(f"{label:>8}" for label in labels) +
          f" {'max ulp':>10} {'max abs':>9} {'max rel':>9}")
    for component, c in final.items():
        print(f"{component:>11} {c['elements']:>9} " +
              " ".join(f"{c['ulp_histogram'][label]:>8}" for label in labels) +
              f" {c['max_ulp']:>10} {c['max_abs_diff']:>9.2e} {c['max_rel_diff']:>9.2e}" +
              ("  identical" if c["identical"] else ""))


def main():
    args = parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda, but torch sees no CUDA device")
    device = torch.device(args.device)
    # IEEE fp32 GEMMs, and fp16/bf16 GEMMs that accumulate in fp32 to the end (no
    # reduced-precision split-K), so that the differences left are the ones README.md lists.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.use_deterministic_algorithms(True)

    schedules_mod, scaler_mod, logger = load_deepspeed(args.deepspeed_src)
    run = Run(args.export_dir, device)
    masters = [t.clone().requires_grad_(True) for t in run.initial]
    optimizer = build_optimizer(masters, run.config["optimizer"])
    scheduler = build_scheduler(schedules_mod, run.config["scheduler"], optimizer)
    scaler = build_loss_scaler(scaler_mod, run.config["fp16"], run.model_dtype)

    ours = train(run, masters, optimizer, scheduler, scaler, args.module_output)
    theirs = run.config["records"]
    rows = per_step_comparison(ours, theirs)
    summary = summarize(rows)
    final = final_comparison(run, masters, optimizer)

    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu")
    report = json_safe({
        "torch_version": torch.__version__,
        "device_name": device_name,
        "deepspeed_src": os.path.abspath(args.deepspeed_src),
        "export_dir": os.path.abspath(args.export_dir),
        "module_output": args.module_output,
        "run": {key: run.config[key] for key in ("model", "precision", "world_size", "micro_batch_size",
                                                  "gradient_accumulation_steps", "steps", "numerics")},
        "deepspeed_warnings": list(logger.collected),
        "steps": ours,
        "zerosim_steps": theirs,
        "per_step": rows,
        "summary": summary,
        "final": final,
    })
    with open(args.out_json, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, allow_nan=False)
        f.write("\n")
    print_report(run, args.module_output, ours, theirs, rows, summary, final)
    print(f"wrote {args.out_json}")


if __name__ == "__main__":
    main()
