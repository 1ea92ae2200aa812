#!/usr/bin/env python3
"""A plain PyTorch training loop with nothing of zerosim in it, for `zerosim exec --hooks torch`.

It checkpoints one of three ways:
  in_place  torch.save(state, CKPT/last.pt) straight over the previous checkpoint
  atomic    torch.save to CKPT/last.pt.tmp, fsync it, os.replace onto last.pt, fsync CKPT
  dcp       torch.distributed.checkpoint.save into CKPT/step_N (one process, no process group);
            the resume loads the newest CKPT/step_N that has a .metadata file, into the
            state_dict() of a fresh optimizer (as many scripts do: that dict has no moments yet,
            so DCP has nowhere to load them)

A small MLP, AdamW, a StepLR schedule, batches drawn from a generator seeded by the step; it
resumes from its newest checkpoint when there is one (model, optimizer, scheduler, step).

    python3 plain_torch_loop.py --ckpt DIR --protocol atomic [--steps 6] [--save-every 2]
"""
import argparse
import os

import torch


def fsync_directory(path):
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def newest_dcp_step(directory):
    steps = [int(name[len("step_"):]) for name in os.listdir(directory)
             if name.startswith("step_") and os.path.exists(os.path.join(directory, name, ".metadata"))]
    return max(steps) if steps else None


def save(state, directory, protocol):
    if protocol == "dcp":
        import torch.distributed.checkpoint as dcp
        dcp.save({**state, "step": torch.tensor(state["step"])},
                 checkpoint_id=os.path.join(directory, "step_%d" % state["step"]))
        return
    path = os.path.join(directory, "last.pt")
    if protocol == "in_place":
        torch.save(state, path)
        return
    temporary = path + ".tmp"
    with open(temporary, "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    fsync_directory(directory)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--protocol", required=True, choices=["in_place", "atomic", "dcp"])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--save-every", type=int, default=2)
    arguments = parser.parse_args()
    if not os.path.isdir(arguments.ckpt):
        # A new directory's name is durable once its parent is fsynced.
        os.makedirs(arguments.ckpt)
        fsync_directory(os.path.dirname(os.path.abspath(arguments.ckpt)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    start = 0
    path = os.path.join(arguments.ckpt, "last.pt")
    newest = newest_dcp_step(arguments.ckpt) if arguments.protocol == "dcp" else None
    if newest is not None:
        import torch.distributed.checkpoint as dcp
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict(), "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=os.path.join(arguments.ckpt, "step_%d" % newest))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start = int(state["step"])
    elif arguments.protocol != "dcp" and os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start = state["step"]
    for step in range(start + 1, arguments.steps + 1):
        generator = torch.Generator().manual_seed(1000 + step)
        inputs = torch.randn(32, 8, generator=generator)
        targets = inputs.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % arguments.save_every == 0:
            save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                  "scheduler": scheduler.state_dict(), "step": step}, arguments.ckpt, arguments.protocol)


if __name__ == "__main__":
    main()
