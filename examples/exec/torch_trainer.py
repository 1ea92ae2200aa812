#!/usr/bin/env python3
"""A small PyTorch trainer for `zerosim exec` on the GPU machine, checkpointing the way most
scripts do:

  torch_save  torch.save(state, CKPT/state.pt) every --save-every steps: written in place, no
              fsync (torch.save does none)
  dcp         torch.distributed.checkpoint.save into CKPT/step_N (one process, no process
              group); the resume loads the newest CKPT/step_N that has a .metadata file

The state log (python/zerosim_state.py) carries the model, the optimizer, the RNG and the step.

    python3 torch_trainer.py --ckpt DIR --mode torch_save|dcp [--steps 6] [--save-every 2]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import zerosim_state  # noqa: E402


def make(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, optimizer


def batch(step, device):
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(8, 16, generator=generator)
    y = torch.randint(0, 4, (8,), generator=generator)
    return x.to(device), y.to(device)


def newest_dcp(directory):
    steps = []
    for name in os.listdir(directory):
        if name.startswith("step_") and os.path.exists(os.path.join(directory, name, ".metadata")):
            steps.append(int(name[len("step_"):]))
    return max(steps) if steps else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--mode", required=True, choices=["torch_save", "dcp"])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--save-every", type=int, default=2)
    arguments = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.use_deterministic_algorithms(True)
    os.makedirs(arguments.ckpt, exist_ok=True)
    model, optimizer = make(device)
    start = 0
    if arguments.mode == "torch_save":
        path = os.path.join(arguments.ckpt, "state.pt")
        if os.path.exists(path):
            state = torch.load(path, map_location=device)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start = state["step"]
    else:
        import torch.distributed.checkpoint as dcp
        step = newest_dcp(arguments.ckpt)
        if step is not None:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": torch.tensor(0)}
            dcp.load(state, checkpoint_id=os.path.join(arguments.ckpt, "step_%d" % step))
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start = int(state["step"])
    log = zerosim_state.StateLog()
    for step in range(start + 1, arguments.steps + 1):
        x, y = batch(step, device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        saved = step % arguments.save_every == 0
        if saved:
            if arguments.mode == "torch_save":
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                           os.path.join(arguments.ckpt, "state.pt"))
            else:
                import torch.distributed.checkpoint as dcp
                dcp.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": torch.tensor(step)},
                         checkpoint_id=os.path.join(arguments.ckpt, "step_%d" % step))
        log.step(step, loss.item(), zerosim_state.torch_components(model, optimizer, rng=False,
                                                                   data_position=step), checkpoint=saved)


if __name__ == "__main__":
    main()
