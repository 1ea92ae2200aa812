"""A training loop written against torch's API, with nothing of zerosim in it, for the torch hook's
test on the test double (tests/data/fake_torch/torch): a weight vector, SGD with momentum, a
scheduler, torch.save of everything every 2 steps, in place or atomically (temporary file, fsync,
rename, directory fsync). Resumes from CKPT/last.pt.

    PYTHONPATH=tests/data/fake_torch python3 train.py CKPT in_place|atomic STEPS
"""
import os
import sys

import torch


def fsync_directory(path):
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def main():
    directory, protocol, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if not os.path.isdir(directory):
        os.makedirs(directory)
        fsync_directory(os.path.dirname(os.path.abspath(directory)))
    weights = torch.tensor([0.0] * 4)
    optimizer = torch.optim.SGD([weights], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LRScheduler(optimizer)
    path = os.path.join(directory, "last.pt")
    start = 0
    if os.path.exists(path):
        state = torch.load(path)
        weights.values = state["weights"]
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start = state["step"]
    for step in range(start + 1, steps + 1):
        inputs = [((step * 7 + i) % 5) / 5.0 for i in range(4)]
        error = sum(w * x for w, x in zip(weights.values, inputs)) - 1.0
        weights.grad = [2.0 * error * x for x in inputs]
        torch.tensor([error * error]).backward()
        optimizer.step()
        scheduler.step()
        if step % 2 == 0:
            state = {"weights": list(weights.values), "optimizer": optimizer.state_dict(),
                     "scheduler": scheduler.state_dict(), "step": step}
            if protocol == "in_place":
                torch.save(state, path)
            else:
                with open(path + ".tmp", "wb") as file:
                    torch.save(state, file)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(path + ".tmp", path)
                fsync_directory(directory)


if __name__ == "__main__":
    main()
