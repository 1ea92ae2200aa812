#!/usr/bin/env python3
"""Golden loss-scale traces from DeepSpeed's deepspeed/runtime/fp16/loss_scaler.py.

The scaler is built the way an fp16 ZeRO-3 engine builds it:
  * the "fp16" config section goes through DeepSpeed's own DeepSpeedFP16Config
    (deepspeed/runtime/precision_config.py, a pydantic model: it coerces and validates);
  * DeepSpeedEngine._configure_zero_optimizer passes static_loss_scale=config.loss_scale,
    dynamic_loss_scale=(config.loss_scale == 0), dynamic_loss_args=config.dynamic_loss_scale_args();
  * DeepSpeedZeroOptimizer_Stage3 calls CreateLossScaler(dtype=torch.half, ...) with those,
    and after each step's overflow check calls loss_scaler.update_scale(overflow).
A config the model refuses is still traced (built with pydantic's unvalidated
model_construct) so that the scaler's own behaviour for such values is on record; its
"config_error" says DeepSpeed would have stopped at configuration time.

Usage: loss_scaler_golden.py DEEPSPEED_SRC OUT_JSON COMMIT
"""

import sys

sys.dont_write_bytecode = True

import dsgolden  # noqa: E402  (after the bytecode switch)

SEED = 20250601
LENGTH = 300


def load_deepspeed(src):
    # loss_scaler.py imports torch (dtype objects), deepspeed.runtime.config_utils,
    # deepspeed.comm (get_rank) and deepspeed.utils.logger; precision_config.py needs
    # pydantic and config_utils (the real one, it holds DeepSpeedConfigModel).
    dtype = type("dtype", (), {})
    half = dtype()
    dsgolden.stub_module("torch", dtype=dtype, half=half, float16=half, bfloat16=dtype(), float32=dtype())
    dsgolden.stub_module("deepspeed")
    dsgolden.stub_module("deepspeed.utils", logger=dsgolden.capturing_logger())
    # Rank 0: the rank that formats the overflow messages (int(cur_scale) included).
    dsgolden.stub_module("deepspeed.comm", get_rank=lambda group=None: 0)
    dsgolden.stub_module("deepspeed.runtime")
    dsgolden.stub_module("deepspeed.runtime.fp16")
    dsgolden.load_ds_module(src, "deepspeed/runtime/config_utils.py", "deepspeed.runtime.config_utils")
    scaler_mod = dsgolden.load_ds_module(src, "deepspeed/runtime/fp16/loss_scaler.py",
                                         "deepspeed.runtime.fp16.loss_scaler")
    precision = dsgolden.load_ds_module(src, "deepspeed/runtime/precision_config.py",
                                        "deepspeed.runtime.precision_config")
    return scaler_mod, precision, half


def build_scaler(scaler_mod, precision, half, fp16):
    """Returns (scaler, fp16 config object, config error text or None)."""
    try:
        cfg = precision.get_float16_config({"fp16": fp16})
        error = None
    except Exception as e:  # the verdict is part of the data
        cfg = precision.DeepSpeedFP16Config.model_construct(**fp16)
        error = f"{type(e).__name__}: {validation_text(e)}"
    scaler = scaler_mod.CreateLossScaler(dtype=half,
                                         static_loss_scale=cfg.loss_scale,
                                         dynamic_scaling=cfg.loss_scale == 0,
                                         dynamic_loss_args=cfg.dynamic_loss_scale_args())
    return scaler, cfg, error


def validation_text(e):
    # pydantic's own str() carries a version-specific documentation URL; the field and
    # message are what matters and stay stable across pydantic releases.
    if not hasattr(e, "errors"):
        return str(e)
    return "; ".join(".".join(map(str, err["loc"])) + (": " if err["loc"] else "") + err["msg"]
                     for err in e.errors())


def state(scaler):
    # The static LossScaler has no hysteresis or iteration counters: those read as null.
    return [
        float(scaler.cur_scale),
        getattr(scaler, "cur_hysteresis", None),
        getattr(scaler, "last_overflow_iter", None),
        getattr(scaler, "cur_iter", None),
    ]


def run_case(scaler_mod, precision, half, name, fp16, overflows):
    scaler, cfg, config_error = build_scaler(scaler_mod, precision, half, fp16)
    initial = state(scaler)
    trace, raised_at, error = [], None, None
    for i, flag in enumerate(overflows):
        try:
            scaler.update_scale(flag == "1")
        except Exception as e:  # DeepSpeed raises a bare Exception at the minimum scale
            raised_at, error = i, f"{type(e).__name__}: {e}"
            break
        trace.append(state(scaler))
    return {
        "name": name,
        "fp16_config": fp16,
        "config_error": config_error,
        "dynamic": scaler.dynamic,
        "options": {
            "loss_scale": cfg.loss_scale,
            "initial_scale_power": cfg.initial_scale_power,
            "loss_scale_window": cfg.loss_scale_window,
            "hysteresis": cfg.hysteresis,
            "consecutive_hysteresis": cfg.consecutive_hysteresis,
            "min_loss_scale": cfg.min_loss_scale,
            "raise_error_at_min_scale": getattr(scaler, "raise_error_at_min_scale", None),
        },
        "overflows": overflows,
        "initial": initial,
        "trace": trace,
        "raised_at": raised_at,
        "error": error,
    }


def fp16_config(power=16, window=1000, hysteresis=2, consecutive=False, min_scale=1, loss_scale=0):
    return {
        "enabled": True,
        "loss_scale": loss_scale,
        "initial_scale_power": power,
        "loss_scale_window": window,
        "hysteresis": hysteresis,
        "consecutive_hysteresis": consecutive,
        "min_loss_scale": min_scale,
    }


class Flags:
    """Overflow-flag strings; only Random.random() is used, whose sequence for a seed is stable."""

    def __init__(self, seed):
        import random
        self.rng = random.Random(seed)

    def density(self, p, n=LENGTH):
        return "".join("1" if self.rng.random() < p else "0" for _ in range(n))

    def bursts(self, start_p, max_len, n=LENGTH):
        out = []
        while len(out) < n:
            if self.rng.random() < start_p:
                out += ["1"] * (1 + int(self.rng.random() * max_len))
            else:
                out.append("0")
        return "".join(out[:n])


def case_list():
    flags = Flags(SEED)
    cases = []

    def add(name, fp16, overflows):
        cases.append((name, fp16, overflows))

    # Overflow densities at DeepSpeed's defaults but a short window, so the scale moves both ways.
    for p in (0, 0.01, 0.1, 0.5, 1.0):
        add(f"density_{p}_w10_h2", fp16_config(window=10), flags.density(p, 400))
    # Scale windows.
    for window in (1, 2, 3, 10, 1000):
        add(f"window_{window}_density_0.05", fp16_config(window=window), flags.density(0.05))
    for window in (1, 3):
        add(f"window_{window}_power0_clean", fp16_config(power=0, window=window, min_scale=1), "0" * 200)
    # Hysteresis 1..3, both refill policies, on bursts of overflows and on a strict alternation.
    for h in (1, 2, 3):
        for consecutive in (False, True):
            tag = f"h{h}_consecutive_{str(consecutive).lower()}"
            add(f"bursts_{tag}", fp16_config(window=5, hysteresis=h, consecutive=consecutive),
                flags.bursts(0.08, 4))
            add(f"alternating_{tag}", fp16_config(window=4, hysteresis=h, consecutive=consecutive),
                "10" * 60 + "0" * 30 + "110" * 30 + "0" * 20 + "1110" * 20)
            add(f"density_0.3_{tag}", fp16_config(window=3, hysteresis=h, consecutive=consecutive),
                flags.density(0.3))
    # Minimum scales and initial powers: long overflow runs walk the scale down to the floor.
    for power in (0, 3, 16, 32):
        for min_scale in (1, 0.25, 128):
            add(f"power{power}_min{min_scale}_runs", fp16_config(power=power, window=20, min_scale=min_scale),
                flags.bursts(0.05, 12))
    for power in (3, 16):
        add(f"power{power}_min1_all_overflow_h1", fp16_config(power=power, hysteresis=1, window=7),
            "1" * 40 + flags.density(0.02, 160))
        add(f"power{power}_min0.25_all_overflow_h3", fp16_config(power=power, hysteresis=3, window=7, min_scale=0.25),
            "1" * 40 + flags.density(0.02, 160))
    # Doubling: long clean stretches after an early drop.
    add("double_many_times_w2", fp16_config(power=16, window=2), "1" * 3 + "0" * 397)
    add("double_many_times_w10_power32", fp16_config(power=32, window=10), "11" + "0" * 398)
    add("clean_then_dense_w5", fp16_config(power=8, window=5, hysteresis=2), "0" * 100 + flags.density(0.6, 200))
    # Values DeepSpeed's config takes (or refuses) that the scaler handles oddly.
    add("hysteresis_0", fp16_config(window=5, hysteresis=0), flags.density(0.2, 100))
    add("hysteresis_neg1", fp16_config(window=5, hysteresis=-1), flags.density(0.2, 100))
    add("initial_below_min", fp16_config(power=3, window=5, min_scale=128), flags.density(0.2, 100))
    add("power_neg2", fp16_config(power=-2, window=5), flags.density(0.2, 100))
    add("window_0", fp16_config(window=0), "0" * 5 + "1" + "0" * 5)
    add("min_loss_scale_0", fp16_config(power=2, window=5, min_scale=0, hysteresis=1), "1" * 40)
    add("min_loss_scale_float_1.0", fp16_config(power=4, window=5, min_scale=1.0, hysteresis=1), "1" * 10)
    add("window_float_2.0", fp16_config(power=4, window=2.0), "1" + "0" * 20)
    # Static loss scale: update_scale does nothing.
    add("static_128", fp16_config(loss_scale=128), flags.density(0.1, 100))
    add("static_1", fp16_config(loss_scale=1), "1" * 20 + "0" * 20)
    return cases


def main():
    args = dsgolden.parse_args(__doc__.splitlines()[0])
    scaler_mod, precision, half = load_deepspeed(args.deepspeed_src)
    cases = [run_case(scaler_mod, precision, half, *c) for c in case_list()]
    names = [c["name"] for c in cases]
    if len(set(names)) != len(names):
        sys.exit("error: duplicate case names")
    dsgolden.write_json(args.out_json, {
        "deepspeed_commit": args.commit,
        "generator": "scripts/deepspeed_golden/loss_scaler_golden.py",
        "seed": SEED,
        "cases": cases,
    })


if __name__ == "__main__":
    main()
