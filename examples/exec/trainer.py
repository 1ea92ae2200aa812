#!/usr/bin/env python3
"""A small trainer in Python's standard library that checkpoints one of four ways, for
`zerosim exec` (its tests and the README's walk-through):

  in_place             open(state.json, "w"), write, close: no fsync at all
  rename_no_dir_fsync  write state.json.tmp, fsync it, os.replace onto state.json; the directory
                       is never fsynced, so the rename may not survive a power loss
  correct              the same, then fsync the directory: the protocol that survives
  deepspeed_latest     each save in its own tag directory (global_stepN/state.json, written
                       correctly), then `latest` written in place with a plain write (no
                       fsync), as DeepSpeed writes it

A linear model, SGD with momentum, batches drawn from a generator seeded by the step: a
resumed run redoes exactly what the uninterrupted one did. Resume: the newest checkpoint the
protocol finds (latest, or state.json), else a fresh start.

    python3 trainer.py --ckpt DIR --protocol correct [--steps 8] [--save-every 2]
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import zerosim_state  # noqa: E402

WIDTH = 8
TRUE_WEIGHTS = [0.5 - 0.125 * i for i in range(WIDTH)]


def batch(step):
    generator = random.Random(1000 + step)
    rows = [[generator.uniform(-1.0, 1.0) for _ in range(WIDTH)] for _ in range(4)]
    return rows, [sum(w * x for w, x in zip(TRUE_WEIGHTS, row)) for row in rows]


def train_step(state, step):
    rows, targets = batch(step)
    gradient = [0.0] * WIDTH
    loss = 0.0
    for row, target in zip(rows, targets):
        error = sum(w * x for w, x in zip(state["weights"], row)) - target
        loss += error * error / len(rows)
        for i in range(WIDTH):
            gradient[i] += 2.0 * error * row[i] / len(rows)
    for i in range(WIDTH):
        state["momentum"][i] = 0.9 * state["momentum"][i] + gradient[i]
        state["weights"][i] -= 0.1 * state["momentum"][i]
    state["step"] = step
    return loss


def fsync_directory(path):
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_file(path, text, protocol):
    if protocol == "in_place":
        with open(path, "w") as file:
            file.write(text)
        return
    temporary = path + ".tmp"
    with open(temporary, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    if protocol != "rename_no_dir_fsync":
        fsync_directory(os.path.dirname(path))


def save(directory, state, protocol):
    text = json.dumps(state, sort_keys=True)
    if protocol != "deepspeed_latest":
        write_file(os.path.join(directory, "state.json"), text, protocol)
        return
    tag = "global_step%d" % state["step"]
    os.makedirs(os.path.join(directory, tag), exist_ok=True)
    fsync_directory(directory)
    write_file(os.path.join(directory, tag, "state.json"), text, "correct")
    with open(os.path.join(directory, "latest"), "w") as latest:  # DeepSpeed: a plain write
        latest.write(tag)


def load(directory, protocol):
    if protocol == "deepspeed_latest":
        latest = os.path.join(directory, "latest")
        if not os.path.exists(latest):
            return None
        with open(latest) as file:
            tag = file.read()
        path = os.path.join(directory, tag, "state.json")
    else:
        path = os.path.join(directory, "state.json")
        if not os.path.exists(path):
            return None
    with open(path) as file:
        return json.load(file)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--protocol", required=True,
                        choices=["in_place", "rename_no_dir_fsync", "correct", "deepspeed_latest"])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--bug", choices=["momentum_not_restored", "weights_rounded_on_load"],
                        help="a planted resume bug, for exec's diagnosis: the momentum starts at zero again, or the "
                             "weights are loaded rounded to 3 decimals (the loss is the first thing to differ)")
    parser.add_argument("--rng", choices=["unseeded", "seeded_not_restored"],
                        help="also draw from Python's global generator each step and report the generators "
                             "(zerosim_state.torch_components(rng=True)): unseeded (never seeded: nothing to "
                             "restore), or seeded_not_restored (seeded at start; a resume seeds it again instead of "
                             "restoring its state)")
    arguments = parser.parse_args()
    if not os.path.isdir(arguments.ckpt):
        # A new directory's name is durable once its parent is fsynced (every protocol does this,
        # so that each one's findings are about its own way of writing).
        os.makedirs(arguments.ckpt)
        fsync_directory(os.path.dirname(os.path.abspath(arguments.ckpt)))
    state = load(arguments.ckpt, arguments.protocol)
    if state is None:
        state = {"step": 0, "weights": [0.0] * WIDTH, "momentum": [0.0] * WIDTH}
    elif arguments.bug == "momentum_not_restored":
        state["momentum"] = [0.0] * WIDTH
    elif arguments.bug == "weights_rounded_on_load":
        state["weights"] = [round(weight, 3) for weight in state["weights"]]
    log = zerosim_state.StateLog()
    if arguments.rng == "seeded_not_restored":
        random.seed(1234)
    for step in range(state["step"] + 1, arguments.steps + 1):
        loss = train_step(state, step)
        if arguments.rng is not None:
            random.random()  # a draw the training does not use (as a dropout mask a script never applies)
        saved = step % arguments.save_every == 0
        if saved:
            save(arguments.ckpt, state, arguments.protocol)
        components = {"weights": zerosim_state.digest_floats(state["weights"]),
                      "momentum": zerosim_state.digest_floats(state["momentum"]),
                      "step": zerosim_state.digest_value(state["step"])}
        if arguments.rng is not None:
            components.update(zerosim_state.torch_components(rng=True))
        log.step(step, loss, components, checkpoint=saved,
                 capture={"weights": state["weights"], "momentum": state["momentum"]})


if __name__ == "__main__":
    main()
