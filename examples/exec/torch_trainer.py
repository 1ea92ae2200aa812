#!/usr/bin/env python3
"""A small PyTorch trainer for `zerosim exec` on the GPU machine, checkpointing the way most
scripts do:

  torch_save  torch.save(state, CKPT/state.pt) every --save-every steps: written in place, no
              fsync (torch.save does none)
  dcp         torch.distributed.checkpoint.save into CKPT/step_N (one process, no process
              group); the resume loads the newest CKPT/step_N that has a .metadata file
  dcp_ranks   the same from every process of a torchrun job (gloo, CPU tensors): each rank
              trains a model of its own (as each ZeRO rank owns its shard) under keys named by
              its rank, so DCP writes one file per rank (__R_0.distcp) and rank 0 the .metadata;
              the state goes through torch.distributed.checkpoint.state_dict's get/set_state_dict
              (which give a fresh optimizer its state before the load); rank 0 writes the state
              log with every rank's components (gathered) and losses

The state log (python/zerosim_state) carries the model, the optimizer, the RNG and the step.

    python3 torch_trainer.py --ckpt DIR --mode torch_save|dcp [--steps 6] [--save-every 2]
    torchrun --standalone --nproc_per_node 2 torch_trainer.py --ckpt DIR --mode dcp_ranks
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import zerosim_state  # noqa: E402


def make(device, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, optimizer


def train_step(model, optimizer, x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


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
    parser.add_argument("--mode", required=True, choices=["torch_save", "dcp", "dcp_ranks"])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--save-every", type=int, default=2)
    arguments = parser.parse_args()
    if arguments.mode == "dcp_ranks":
        return train_ranks(arguments)
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
        loss = train_step(model, optimizer, *batch(step, device))
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


def train_ranks(arguments):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.use_deterministic_algorithms(True)
    os.makedirs(arguments.ckpt, exist_ok=True)
    model, optimizer = make("cpu", seed=rank)  # each rank's model is its own
    name = "rank%d" % rank

    def checkpoint_state(step):
        model_state, optimizer_state = get_state_dict(model, optimizer)
        return {name: {"model": model_state, "optimizer": optimizer_state}, "step": torch.tensor(step)}

    start = 0
    newest = newest_dcp(arguments.ckpt)
    if newest is not None:
        state = checkpoint_state(0)
        dcp.load(state, checkpoint_id=os.path.join(arguments.ckpt, "step_%d" % newest))
        set_state_dict(model, optimizer, model_state_dict=state[name]["model"],
                       optim_state_dict=state[name]["optimizer"])
        start = int(state["step"])
    log = zerosim_state.StateLog() if rank == 0 else None
    for step in range(start + 1, arguments.steps + 1):
        loss = train_step(model, optimizer, *batch(step * world_size + rank, "cpu"))
        saved = step % arguments.save_every == 0
        if saved:
            dcp.save(checkpoint_state(step), checkpoint_id=os.path.join(arguments.ckpt, "step_%d" % step))
        components = zerosim_state.torch_components(model, optimizer, rng=False, data_position=step)
        gathered = [None] * world_size
        dist.all_gather_object(gathered, {"components": components, "loss": loss.item()})
        if log is not None:
            merged = {}
            for r, part in enumerate(gathered):
                merged.update({"rank%d.%s" % (r, key): value for key, value in part["components"].items()})
                merged["rank%d.loss" % r] = zerosim_state.digest_floats([part["loss"]])
            log.step(step, gathered[0]["loss"], merged, checkpoint=saved)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
