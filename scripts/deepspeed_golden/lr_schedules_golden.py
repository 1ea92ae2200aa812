#!/usr/bin/env python3
"""Golden learning-rate sequences from DeepSpeed's deepspeed/runtime/lr_schedules.py.

Runs DeepSpeed's scheduler classes the way DeepSpeedEngine drives them:
  * construction: `scheduler(optimizer, **config["scheduler"]["params"])`
    (engine._scheduler_from_config passes the config's params dict untouched);
  * optimizer step k (k = 1..N) uses optimizer.param_groups[0]['lr'], and after each
    applied step the engine calls `lr_scheduler.step()` (engine._take_model_step).
So lrs[0] is the value set by the constructor, lrs[k-1] the one optimizer step k uses.

Usage: lr_schedules_golden.py DEEPSPEED_SRC OUT_JSON COMMIT
"""

import sys

sys.dont_write_bytecode = True

import dsgolden  # noqa: E402  (after the bytecode switch)

OPTIMIZER_LR = 3e-4  # differs from WarmupDecayLR's 0.001 default, so the two defaults are told apart
MAX_VALUES_PER_CASE = 2000
ODD_CASE_STEPS = 50

GIVEN_LR_PARAMS = {"warmup_min_lr": 1e-5, "warmup_max_lr": 2e-3}
GIVEN_COS_PARAMS = {"warmup_min_ratio": 0.05, "cos_min_ratio": 0.1}


def load_lr_schedules(src):
    # lr_schedules.py imports: torch.optim.Optimizer, torch.is_tensor, deepspeed.utils.logger.
    torch = dsgolden.stub_module("torch", is_tensor=lambda x: False)
    dsgolden.stub_module("torch.optim", Optimizer=type("Optimizer", (), {}))
    dsgolden.stub_module("deepspeed")
    logger = dsgolden.capturing_logger()
    dsgolden.stub_module("deepspeed.utils", logger=logger)
    module = dsgolden.load_ds_module(src, "deepspeed/runtime/lr_schedules.py", "deepspeed.runtime.lr_schedules")
    return module, torch.optim.Optimizer, logger


def make_optimizer(optimizer_base, lr):
    opt = optimizer_base()
    opt.param_groups = [{"lr": lr, "betas": (0.9, 0.999)}]
    return opt


def construct(mod, optimizer_base, logger, sched_type, params, optimizer_lr):
    """Returns (optimizer, scheduler or None, error text or None, warnings)."""
    del logger.collected[:]
    opt = make_optimizer(optimizer_base, optimizer_lr)
    try:
        # A config without "params" reaches the constructor as **None, as in the engine.
        sched = getattr(mod, sched_type)(opt, **params)
        error = None
    except Exception as e:  # the verdict is the data being recorded
        sched, error = None, f"{type(e).__name__}: {e}"
    return opt, sched, error, list(logger.collected)


def run_case(mod, optimizer_base, logger, name, sched_type, params, optimizer_lr, n):
    opt, sched, error, warnings = construct(mod, optimizer_base, logger, sched_type, params, optimizer_lr)
    if error is not None:
        sys.exit(f"error: case {name} was refused by DeepSpeed: {error}")
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()
    return {
        "name": name,
        "type": sched_type,
        "params": params,
        "optimizer_lr": optimizer_lr,
        "warnings": warnings,
        "lrs": lrs,
        "state_dict": sched.state_dict(),
    }


def regular_cases():
    """(name, type, params, n) for the warmup/decay grid."""
    out = []
    for warmup in (1, 2, 5, 37, 1000):
        for wtype in ("log", "linear"):
            for variant in ("defaults", "given"):
                # The 1000-step warmup is long. To keep the file small WarmupLR runs it for
                # (log, defaults) and (linear, given), WarmupDecayLR for the first pair only
                # and WarmupCosineLR for the second; the short warmups cover every combination.
                long_pair = (wtype, variant) in (("log", "defaults"), ("linear", "given"))
                if warmup == 1000 and not long_pair:
                    continue
                base = {"warmup_num_steps": warmup, "warmup_type": wtype}
                lr_params = dict(base, **(GIVEN_LR_PARAMS if variant == "given" else {}))
                cos_params = dict(base, **(GIVEN_COS_PARAMS if variant == "given" else {}))
                tag = f"w{warmup}_{wtype}_{variant}"
                out.append((f"WarmupLR_{tag}", "WarmupLR", lr_params, warmup + 20))
                # max(2, warmup) is what DeepSpeed uses internally; "below" must be below that.
                effective = max(2, warmup)
                totals = {
                    "below": effective // 2,
                    "equal": effective,
                    "above": effective + min(effective + 7, 300),
                }
                for rel, total in totals.items():
                    n = max(total, effective) + 20
                    if warmup != 1000 or variant == "defaults":
                        out.append((f"WarmupDecayLR_{tag}_total_{rel}", "WarmupDecayLR",
                                    dict(lr_params, total_num_steps=total), n))
                    if warmup != 1000 or variant == "given":
                        out.append((f"WarmupCosineLR_{tag}_total_{rel}", "WarmupCosineLR",
                                    dict(cos_params, total_num_steps=total), n))
    return out


def refusal_probes():
    """(name, type, params): configs whose acceptance by DeepSpeed is the question."""
    probes = []
    all_types = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR")
    decay_types = ("WarmupDecayLR", "WarmupCosineLR")
    for value, tag in ((5.0, "float_5.0"), (1e1, "float_1e1"), (0, "0"), (-3, "neg3"), (True, "true"),
                       ("5", "string_5"), (None, "null"), (1, "1")):
        for t in all_types:
            params = {"warmup_num_steps": value}
            if t in decay_types:
                params["total_num_steps"] = 100
            probes.append((f"{t}_warmup_num_steps_{tag}", t, params))
    for value, tag in ((0, "0"), (-1, "neg1"), (5.0, "float_5.0"), (True, "true"), ("100", "string_100"),
                       (None, "null")):
        for t in decay_types:
            probes.append((f"{t}_total_num_steps_{tag}", t, {"warmup_num_steps": 10, "total_num_steps": value}))
    for t in decay_types:
        probes.append((f"{t}_total_num_steps_missing", t, {"warmup_num_steps": 10}))
    for value, tag in ((-0.5, "neg0.5"), (1.5, "1.5")):
        probes.append((f"WarmupCosineLR_cos_min_ratio_{tag}", "WarmupCosineLR", {
            "warmup_num_steps": 10,
            "total_num_steps": 30,
            "cos_min_ratio": value
        }))
    for value, tag in ((-0.1, "neg0.1"), (1.5, "1.5")):
        probes.append((f"WarmupCosineLR_warmup_min_ratio_{tag}", "WarmupCosineLR", {
            "warmup_num_steps": 10,
            "total_num_steps": 30,
            "warmup_min_ratio": value
        }))
    for t in all_types:
        params = {"warmup_num_steps": 10, "warmup_type": "cosine"}
        if t in decay_types:
            params["total_num_steps"] = 30
        probes.append((f"{t}_warmup_type_cosine", t, params))
    # Keys a type does not take: WarmupCosineLR has ratios, not absolute lrs.
    probes.append(("WarmupCosineLR_warmup_max_lr_key", "WarmupCosineLR", {
        "warmup_num_steps": 10,
        "total_num_steps": 30,
        "warmup_max_lr": 0.001
    }))
    probes.append(("WarmupLR_total_num_steps_key", "WarmupLR", {"warmup_num_steps": 10, "total_num_steps": 30}))
    probes.append(("WarmupLR_unknown_key", "WarmupLR", {"warmup_num_steps": 10, "warmup_steps": 10}))
    # Values DeepSpeed takes without checking.
    for t in ("WarmupLR", "WarmupDecayLR"):
        extra = {"total_num_steps": 30} if t == "WarmupDecayLR" else {}
        probes.append((f"{t}_min_above_max", t, dict(extra, warmup_num_steps=10, warmup_min_lr=0.01,
                                                     warmup_max_lr=0.001)))
        probes.append((f"{t}_negative_max_lr", t, dict(extra, warmup_num_steps=10, warmup_max_lr=-0.001)))
        probes.append((f"{t}_max_lr_string", t, dict(extra, warmup_num_steps=10, warmup_max_lr="0.001")))
        probes.append((f"{t}_max_lr_list1", t, dict(extra, warmup_num_steps=10, warmup_max_lr=[0.002])))
        probes.append((f"{t}_max_lr_list2", t, dict(extra, warmup_num_steps=10, warmup_max_lr=[0.002, 0.003])))
        probes.append((f"{t}_min_lr_null", t, dict(extra, warmup_num_steps=10, warmup_min_lr=None)))
    for t in all_types:
        extra = {"total_num_steps": 30} if t in decay_types else {}
        # A resume-style last_batch_iteration in the config skips the constructor's lr update.
        probes.append((f"{t}_last_batch_iteration_5", t, dict(extra, warmup_num_steps=10, last_batch_iteration=5)))
    probes.append(("WarmupLR_params_missing", "WarmupLR", None))
    return probes


def main():
    args = dsgolden.parse_args(__doc__.splitlines()[0])
    mod, optimizer_base, logger = load_lr_schedules(args.deepspeed_src)

    cases = []
    for name, sched_type, params, n in regular_cases():
        if n > MAX_VALUES_PER_CASE:
            sys.exit(f"error: case {name} would record {n} values")
        cases.append(run_case(mod, optimizer_base, logger, name, sched_type, params, OPTIMIZER_LR, n))

    refusals = []
    for name, sched_type, params in refusal_probes():
        _, sched, error, warnings = construct(mod, optimizer_base, logger, sched_type, params, OPTIMIZER_LR)
        refusals.append({
            "name": name,
            "type": sched_type,
            "params": params,
            "optimizer_lr": OPTIMIZER_LR,
            "accepted": sched is not None,
            "error": error,
            "warnings": warnings,
        })
        if sched is not None:
            cases.append(run_case(mod, optimizer_base, logger, name, sched_type, params, OPTIMIZER_LR,
                                  ODD_CASE_STEPS))

    dsgolden.write_json(
        args.out_json, {
            "deepspeed_commit": args.commit,
            "generator": "scripts/deepspeed_golden/lr_schedules_golden.py",
            "cases": cases,
            "refusals": refusals,
        })


if __name__ == "__main__":
    main()
