#!/usr/bin/env python3
"""Compares DeepSpeed runs written by ds_train.py: a resume against the uninterrupted run, and
the uninterrupted run against zerosim's export of the same run.

  ds_compare.py resume UNINTERRUPTED_DIR SAVED_DIR RESUMED_DIR K OUT_JSON
      right after the load (RESUMED/state-loaded against SAVED/state-K, the state the saving
      process held once its save returned; UNINTERRUPTED/state-K when SAVED is "-"): every master,
      exp_avg and exp_avg_sq, the step counters, lr, scheduler and loss scaler; then each step
      after K (loss, lr, scale, skipped, grad norm) and the final state: which states differ,
      from which step, by how much.
  ds_compare.py numbers EXPORT_DIR UNINTERRUPTED_DIR OUT_JSON
      DeepSpeed's steps against zerosim's records (run.json) and its final fp32 master and
      moments against zerosim's (final.safetensors), as ULP histograms.
  ds_compare.py pair RUN_A RUN_B LABELS OUT_JSON
      two DeepSpeed runs of the same export that should agree bit for bit (the optimizer on the
      CPU and on NVMe, say): each step's loss, lr, scale, skipped, grad norm, and the states
      state-LABEL of both for each label of LABELS (comma-separated: 1,2,final).
  ds_compare.py across EXPORT_DIR SAVED_DIR K LOADED_DIR OUT_JSON
      a load on another world size: SAVED_DIR/rank*/state-K (each rank's partition, flat) joined
      in rank order, against LOADED_DIR's state-loaded (whole parameters, one rank): how many
      loaded masters equal the saved ones, the saved ones rounded to fp16 / bf16, and the
      export's initial weights; the counters of both.
  ds_compare.py data UNINTERRUPTED_DIR SAVED_DIR RESUMED_DIR K OUT_JSON
      runs of ds_train.py --data engine-loader: the rows each resumed step took against the
      uninterrupted run's rows of the same step and of every step; what the checkpoint holds of
      the data position (SAVED/checkpoint-keys.json: data_sampler, random_ltd); torch's
      generator after the load against the saving process's at the save and the uninterrupted
      run's after step K (UNINTERRUPTED/state-K: ds_train.py --capture-at K).
"""

import json
import math
import os
import sys

sys.dont_write_bytecode = True

import numpy as np  # noqa: E402
from safetensors import safe_open  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch_reference"))
from train_like_deepspeed import ULP_BINS, compare_tensors, json_safe, per_step_comparison, summarize  # noqa: E402

COMPONENTS = ("master", "exp_avg", "exp_avg_sq")
# DeepSpeed's states also hold the 16-bit parameters the next forward computes with.
DEEPSPEED_COMPONENTS = COMPONENTS + ("param16",)


def load_state(path):
    error = path.replace(".safetensors", ".error")
    if os.path.isfile(error):
        with open(error, encoding="utf-8") as f:
            sys.exit(f"error: {path}: DeepSpeed could not hand out this state: {f.read().strip()}")
    if not os.path.isfile(path):
        sys.exit(f"error: {path}: no such state file (did the DeepSpeed run reach it?)")
    with safe_open(path, framework="np") as f:
        tensors = {key: f.get_tensor(key) for key in f.keys()}
        scalars = json.loads(f.metadata()["scalars"])
    return tensors, scalars


def load_records(directory):
    path = os.path.join(directory, "records.json")
    if not os.path.isfile(path):
        sys.exit(f"error: {path}: no such file")
    with open(path, encoding="utf-8") as f:
        return json.load(f)["records"]


def compare_components(ours, theirs, components=COMPONENTS):
    result = {}
    for component in components:
        names = sorted(k for k in ours if k.startswith(component + "/"))
        if names != sorted(k for k in theirs if k.startswith(component + "/")):
            sys.exit(f"error: the two states hold different {component} tensors")
        a = np.concatenate([ours[n].ravel() for n in names]) if names else np.zeros(0, np.float32)
        b = np.concatenate([theirs[n].ravel() for n in names]) if names else np.zeros(0, np.float32)
        result[component] = compare_tensors(a, b)
    return result


def shared_components(a, b):
    """The components both states hold (states written before the 16-bit parameters were)."""
    return tuple(c for c in DEEPSPEED_COMPONENTS
                 if any(k.startswith(c + "/") for k in a) and any(k.startswith(c + "/") for k in b))


def rounded(values, precision):
    """fp32 values rounded to the nearest fp16 or bf16 (ties to even), back in fp32."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if precision == "fp16":
        return values.astype(np.float16).astype(np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def masters_equal_rounded(expected, loaded):
    """How many loaded masters equal the expected ones rounded to fp16, and to bf16: a master
    rebuilt from 16-bit weights, not read from an fp32 copy, shows as equal to one of them."""
    names = sorted(k for k in expected if k.startswith("master/"))
    a = np.concatenate([expected[n].ravel() for n in names]).astype(np.float32)
    b = np.concatenate([loaded[n].ravel() for n in names]).astype(np.float32)
    return {precision: int(np.count_nonzero(rounded(a, precision).view(np.uint32) == b.view(np.uint32)))
            for precision in ("fp16", "bf16")}


def print_components(title, comparison):
    labels = [label for label, _, _ in ULP_BINS]
    print(title)
    print(f"{'':>11} {'elements':>9} " + " ".join(f"{label:>8}" for label in labels) +
          f" {'max ulp':>10} {'max abs':>9} {'max rel':>9}")
    for component, c in comparison.items():
        print(f"{component:>11} {c['elements']:>9} " + " ".join(f"{c['ulp_histogram'][label]:>8}" for label in labels) +
              f" {c['max_ulp']:>10} {c['max_abs_diff']:>9.2e} {c['max_rel_diff']:>9.2e}" +
              ("  identical" if c["identical"] else ""))


def scalar_differences(expected, found):
    return {key: {"uninterrupted": expected.get(key), "resumed": found.get(key)}
            for key in sorted(set(expected) | set(found)) if expected.get(key) != found.get(key)}


def step_differences(expected, found):
    """Per resumed step: which of loss, lr, scale, skipped, grad norm differ (bit for bit)."""
    by_step = {r["step"]: r for r in expected}
    rows = []
    for r in found:
        e = by_step.get(r["step"])
        if e is None:
            rows.append({"step": r["step"], "differs": ["the uninterrupted run has no such step"]})
            continue
        differs = [key for key in ("loss", "lr", "loss_scale", "skipped", "grad_norm") if e[key] != r[key]]
        rows.append({"step": r["step"], "differs": differs,
                     "loss": [e["loss"], r["loss"]], "loss_scale": [e["loss_scale"], r["loss_scale"]],
                     "lr": [e["lr"], r["lr"]], "skipped": [e["skipped"], r["skipped"]],
                     "grad_norm": [e["grad_norm"], r["grad_norm"]]})
    return rows


def first_differing_step(steps):
    return next((row["step"] for row in steps if row["differs"]), None)


def print_steps(steps, names, third):
    """Each step of step_differences: both runs' losses and scales, and `third` (lr or grad_norm)."""
    print(f"{'step':>5} {'loss ' + names[0]:>19} {'loss ' + names[1]:>14} {'scale':>17} {third:>27}  differs")
    for row in steps:
        if "loss" not in row:
            print(f"{row['step']:>5}  {row['differs'][0]}")
            continue
        print(f"{row['step']:>5} {row['loss'][0]:>19.9g} {row['loss'][1]:>14.9g} "
              f"{row['loss_scale'][0]:>8g}/{row['loss_scale'][1]:<8g} {row[third][0]:>13.6g}/{row[third][1]:<13.6g}  "
              f"{', '.join(row['differs']) or '-'}")


def resume(uninterrupted, saved, resumed, k, out_json):
    expected_tensors, expected_scalars = load_state(
        os.path.join(uninterrupted if saved == "-" else saved, f"state-{k}.safetensors"))
    loaded_tensors, loaded_scalars = load_state(os.path.join(resumed, "state-loaded.safetensors"))
    final_expected, final_expected_scalars = load_state(os.path.join(uninterrupted, "state-final.safetensors"))
    final_found, final_found_scalars = load_state(os.path.join(resumed, "state-final.safetensors"))
    after_load = compare_components(expected_tensors, loaded_tensors, shared_components(expected_tensors, loaded_tensors))
    final = compare_components(final_expected, final_found, shared_components(final_expected, final_found))
    steps = step_differences(load_records(uninterrupted), load_records(resumed))
    report = {
        "k": k,
        "after_load": {"tensors": after_load, "scalars": scalar_differences(expected_scalars, loaded_scalars),
                       "master_equal_to_expected_rounded": masters_equal_rounded(expected_tensors, loaded_tensors)},
        "steps": steps,
        "first_differing_step": first_differing_step(steps),
        "final": {"tensors": final, "scalars": scalar_differences(final_expected_scalars, final_found_scalars)},
    }
    print_components(f"right after the load (resumed vs the saving run after step {k}), ULP distance:", after_load)
    for key, pair in report["after_load"]["scalars"].items():
        print(f"  {key}: uninterrupted {pair['uninterrupted']}, resumed {pair['resumed']}")
    equal_rounded = report["after_load"]["master_equal_to_expected_rounded"]
    print(f"  loaded masters equal to the saving run's rounded to fp16: {equal_rounded['fp16']}, to bf16: "
          f"{equal_rounded['bf16']} (of {after_load['master']['elements']})")
    print_steps(steps, ("uninterrupted", "resumed"), "lr")
    print_components("final state (resumed vs uninterrupted), ULP distance:", final)
    for key, pair in report["final"]["scalars"].items():
        print(f"  {key}: uninterrupted {pair['uninterrupted']}, resumed {pair['resumed']}")
    print(f"first differing step: {report['first_differing_step']}")
    write(out_json, report)


def numbers(export_dir, uninterrupted, out_json):
    with open(os.path.join(export_dir, "run.json"), encoding="utf-8") as f:
        run = json.load(f)
    ours = load_records(uninterrupted)
    theirs = run["records"]
    rows = per_step_comparison(ours, theirs)
    summary = summarize(rows)
    final_ds, _ = load_state(os.path.join(uninterrupted, "state-final.safetensors"))
    zerosim = {}
    with safe_open(os.path.join(export_dir, "final.safetensors"), framework="np") as f:
        for key in f.keys():
            if key.split("/")[0] in COMPONENTS:
                zerosim[key] = f.get_tensor(key)
    final = compare_components(final_ds, zerosim)
    print(f"model {run['model']}, {run['precision']}, W={run['world_size']}, {run['steps']} steps, zerosim numerics "
          f"{run['numerics']}")
    print(f"{'step':>5} {'loss deepspeed':>15} {'loss zerosim':>13} {'loss rel':>9} {'lr':>3} {'scale':>12} "
          f"{'skip':>5} {'gnorm ds':>12} {'gnorm rel':>9}")
    for o, t, r in zip(ours, theirs, rows):

        def number(value, spec):
            return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)

        print(f"{r['step']:>5} {number(o['loss'], '15.8g')} {number(t['loss'], '13.8g')} "
              f"{number(r['loss_rel_diff'], '9.2e')} {'=' if r['lr_equal'] else '!=':>3} "
              f"{o['loss_scale']:>10.10g}{'=' if r['scale_equal'] else '!=':>2} "
              f"{('yes' if o['skipped'] else 'no') + ('=' if r['skipped_equal'] else '!='):>5} "
              f"{number(o['grad_norm'], '12.6g')} {number(r['grad_norm_rel_diff'], '9.2e')}")
    print(f"lr all equal: {summary['lr_all_equal']}, loss scale all equal: {summary['scale_all_equal']}, skips all "
          f"equal: {summary['skipped_all_equal']}, max loss rel diff: {summary['max_loss_rel_diff']}, max grad-norm "
          f"rel diff: {summary['max_grad_norm_rel_diff']}")
    print_components("final state, DeepSpeed vs zerosim, ULP distance:", final)
    write(out_json, {"per_step": rows, "summary": summary, "final": final, "deepspeed_steps": ours,
                     "zerosim_steps": theirs})


def pair(run_a, run_b, labels, out_json):
    steps = step_differences(load_records(run_a), load_records(run_b))
    report = {"a": run_a, "b": run_b, "steps": steps, "first_differing_step": first_differing_step(steps),
              "states": {}}
    print(f"A {run_a}\nB {run_b}")
    print_steps(steps, ("A", "B"), "grad_norm")
    for label in labels:
        a, a_scalars = load_state(os.path.join(run_a, f"state-{label}.safetensors"))
        b, b_scalars = load_state(os.path.join(run_b, f"state-{label}.safetensors"))
        comparison = compare_components(a, b, shared_components(a, b))
        differing = {key: {"a": a_scalars.get(key), "b": b_scalars.get(key)}
                     for key in sorted(set(a_scalars) | set(b_scalars)) if a_scalars.get(key) != b_scalars.get(key)}
        on_grid = {name: masters_equal_rounded(x, x) for name, x in (("a", a), ("b", b))}
        report["states"][label] = {"tensors": comparison, "scalars": differing, "masters_on_16_bit_grid": on_grid}
        print_components(f"state-{label}, A vs B, ULP distance:", comparison)
        for key, values in differing.items():
            print(f"  {key}: A {values['a']}, B {values['b']}")
        print(f"  masters equal to their own fp16 / bf16 rounding: A {on_grid['a']['fp16']} / {on_grid['a']['bf16']}, "
              f"B {on_grid['b']['fp16']} / {on_grid['b']['bf16']} (of {comparison['master']['elements']})")
    print(f"first differing step: {report['first_differing_step']}")
    write(out_json, report)


def across(export_dir, saved, k, loaded_dir, out_json):
    ranks = sorted((d for d in os.listdir(saved) if d.startswith("rank") and d[4:].isdigit()), key=lambda d: int(d[4:]))
    if not ranks:
        sys.exit(f"error: {saved} holds no rank directories (rank0, rank1, ...)")
    parts = [load_state(os.path.join(saved, d, f"state-{k}.safetensors")) for d in ranks]
    for index, (directory, (_, scalars)) in enumerate(zip(ranks, parts)):
        if scalars.get("rank") != index or scalars.get("world_size") != len(ranks):
            sys.exit(f"error: {saved}/{directory} holds rank {scalars.get('rank')} of world size "
                     f"{scalars.get('world_size')}, not rank {index} of the {len(ranks)} rank directories there")
    loaded, loaded_scalars = load_state(os.path.join(loaded_dir, "state-loaded.safetensors"))
    if loaded_scalars.get("world_size") != 1:
        sys.exit(f"error: {loaded_dir} was loaded on {loaded_scalars.get('world_size')} ranks; across compares a load "
                 f"on one rank")
    with safe_open(os.path.join(export_dir, "initial.safetensors"), framework="np") as f:
        initial = {key: f.get_tensor(key) for key in f.keys()}
    names = sorted(key for key in loaded if key.startswith("master/"))
    joined, start = {}, {}
    for key in names:
        joined[key] = np.concatenate([tensors[key].ravel() for tensors, _ in parts])
        if joined[key].size != loaded[key].size:
            sys.exit(f"error: {key}: the saved partitions hold {joined[key].size} elements, the loaded parameter "
                     f"{loaded[key].size}")
        start[key] = initial[key.split("/", 1)[1]]
    bits = np.concatenate([loaded[key].ravel() for key in names]).astype(np.float32).view(np.uint32)

    def equal_bits(expected):
        return int(np.count_nonzero(np.concatenate([expected[key].ravel() for key in names]).astype(np.float32)
                                    .view(np.uint32) == bits))

    report = {
        "elements": int(bits.size),
        "equal_to_saved": equal_bits(joined),
        "equal_to_saved_rounded": masters_equal_rounded(joined, loaded),
        "equal_to_initial": equal_bits(start),
        "saved_scalars": [scalars for _, scalars in parts],
        "loaded_scalars": loaded_scalars,
    }
    print(f"loaded on 1 rank from {len(ranks)} ranks' checkpoint (step {k}): of {report['elements']} masters, equal to "
          f"the saved: {report['equal_to_saved']}; to the saved rounded to fp16 / bf16: "
          f"{report['equal_to_saved_rounded']['fp16']} / {report['equal_to_saved_rounded']['bf16']}; to the initial "
          f"weights: {report['equal_to_initial']}")
    for key in ("global_steps", "global_samples", "optimizer_steps", "scheduler_last_batch_iteration"):
        print(f"  {key}: saved {parts[0][1].get(key)}, loaded {loaded_scalars.get(key)}")
    write(out_json, report)


def data(uninterrupted, saved, resumed, k, out_json):
    expected = {r["step"]: r for r in load_records(uninterrupted)}
    found = load_records(resumed)
    missing = [r["step"] for r in found if r["step"] not in expected]
    if missing:
        sys.exit(f"error: {uninterrupted} has no record of step(s) {missing}, which the resumed run took")
    if any("samples" not in r for r in list(expected.values()) + found):
        sys.exit("error: the records hold no rows per step: run ds_train.py with --data engine-loader")
    by_rows = {tuple(r["samples"]): r["step"] for r in expected.values()}
    steps = [{"step": r["step"], "rows": r["samples"], "same_rows_as_uninterrupted": r["samples"] ==
              expected[r["step"]]["samples"], "rows_of_uninterrupted_step": by_rows.get(tuple(r["samples"]))}
             for r in found]
    keys_path = os.path.join(saved, "checkpoint-keys.json")
    with open(keys_path, encoding="utf-8") as f:
        keys = json.load(f)
    model_states = {name: held for name, held in keys.items() if name.endswith("model_states.pt")}
    _, at_save = load_state(os.path.join(saved, f"state-{k}.safetensors"))
    _, uninterrupted_at_k = load_state(os.path.join(uninterrupted, f"state-{k}.safetensors"))
    _, after_load = load_state(os.path.join(resumed, "state-loaded.safetensors"))
    report = {"steps": steps,
              "checkpoint": {name: {key: held.get(key, "absent") for key in ("data_sampler", "random_ltd")}
                             for name, held in model_states.items()},
              "torch_rng": {"uninterrupted_at_k": uninterrupted_at_k.get("torch_rng"), "at_save": at_save.get("torch_rng"),
                            "after_load": after_load.get("torch_rng")}}
    for row in steps:
        if row["same_rows_as_uninterrupted"]:
            verdict = "the uninterrupted run's"
        else:
            verdict = f"not the uninterrupted run's; its step {row['rows_of_uninterrupted_step']}'s"
        print(f"step {row['step']:>3}: rows {row['rows']}: {verdict}")
    for name, held in report["checkpoint"].items():
        print(f"{name}: data_sampler {held['data_sampler']}, random_ltd {held['random_ltd']}")
    print(f"torch's generator after step {k}: uninterrupted {report['torch_rng']['uninterrupted_at_k']}, the saving "
          f"process {report['torch_rng']['at_save']}; the resumed process after the load {report['torch_rng']['after_load']}")
    write(out_json, report)


def write(path, report):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(json_safe(report), f, indent=1, allow_nan=False)
        f.write("\n")
    print(f"wrote {path}")


def step_argument(text):
    if not text.isdigit() or text.startswith("0"):
        sys.exit(f"error: K {text!r}: a step, a positive integer")
    return int(text)


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "resume":
        resume(sys.argv[2], sys.argv[3], sys.argv[4], step_argument(sys.argv[5]), sys.argv[6])
    elif len(sys.argv) == 5 and sys.argv[1] == "numbers":
        numbers(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 6 and sys.argv[1] == "pair" and all(sys.argv[4].split(",")):
        pair(sys.argv[2], sys.argv[3], sys.argv[4].split(","), sys.argv[5])
    elif len(sys.argv) == 7 and sys.argv[1] == "across":
        across(sys.argv[2], sys.argv[3], step_argument(sys.argv[4]), sys.argv[5], sys.argv[6])
    elif len(sys.argv) == 7 and sys.argv[1] == "data":
        data(sys.argv[2], sys.argv[3], sys.argv[4], step_argument(sys.argv[5]), sys.argv[6])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
