#!/usr/bin/env python3
"""Karpathy's nanoGPT `train.py`, unmodified, under `zerosim exec`: this wrapper runs it (runpy, in
the nanoGPT checkout, with its `--key=value` overrides) and writes the state log from outside.

  the loss   GradScaler.scale is wrapped (nanoGPT does `scaler.scale(loss).backward()`): the last
             loss scaled keeps its float (loss / gradient_accumulation_steps: the loss itself at 1)
  a step     a global optimizer step post hook makes the line of step iter_num + 1 (iter_num read
             from train.py's globals, found up the stack) with the digests of the model's
             parameters and of the optimizer's state, and holds it
  a save     torch.save is wrapped: once a save of a dict with "iter_num" returns, the held line
             (whose step equals that iter_num) is written with "checkpoint": true
  otherwise  the held line is written, "checkpoint": false, at the next step or when train.py ends

nanoGPT's order: at the top of iteration N it evaluates and (N > 0) saves ckpt.pt with
iter_num = N, the state after N optimizer steps; then it runs iteration N's step (the line of step
N + 1) and iter_num += 1; it stops once iter_num > max_iters, so max_iters=12 runs 13 steps, and
the lines of steps 4, 8 and 12 say "checkpoint": true.

nanoGPT reads configurator.py and data/<dataset>/ from the current directory and imports model.py,
so this chdir()s into the checkout (an --out_dir must be absolute). The repository keeps a copy
of train.py, model.py and configurator.py outside git in .device-ext/nanoGPT/ (COMMIT names the
commit); a tiny data set (random tokens below 64, vocab_size 64) goes into NANOGPT/data/zs:

    python3 examples/exec/nanogpt_run.py --make-data NANOGPT

The run (from the repository root; NG=.device-ext/nanoGPT, OUT=/tmp/ngck):

    ARGS="--dataset=zs --out_dir=$OUT --n_layer=2 --n_head=2 --n_embd=64 --block_size=32 \
      --batch_size=4 --max_iters=12 --eval_interval=4 --eval_iters=2 --log_interval=1 \
      --always_save_checkpoint=True --compile=False --dtype=float32 --device=cuda \
      --wandb_log=False --gradient_accumulation_steps=1"
    rm -rf $OUT && mkdir -p $OUT
    zerosim exec --watch $OUT --crash-points 16 --states-per-point 2 --resume-command \
      "if [ -e $OUT/ckpt.pt ]; then python3 examples/exec/nanogpt_run.py $NG $ARGS --init_from=resume; \
       else python3 examples/exec/nanogpt_run.py $NG $ARGS; fi" \
      -- python3 examples/exec/nanogpt_run.py $NG $ARGS

    python3 nanogpt_run.py NANOGPT [--key=value ...]     train.py with these overrides
    python3 nanogpt_run.py --make-data NANOGPT           writes NANOGPT/data/zs/{train,val}.bin, meta.pkl
"""
import os
import pickle
import runpy
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import zerosim_state  # noqa: E402


def make_data(directory):
    import numpy as np

    out = os.path.join(directory, "data", "zs")
    os.makedirs(out, exist_ok=True)
    generator = np.random.default_rng(1234)
    for name, count in (("train.bin", 20000), ("val.bin", 4000)):
        generator.integers(0, 64, size=count, dtype=np.uint16).tofile(os.path.join(out, name))
    with open(os.path.join(out, "meta.pkl"), "wb") as meta:
        pickle.dump({"vocab_size": 64}, meta)
    print("nanogpt_run: wrote %s (train.bin 20000 tokens, val.bin 4000, vocab_size 64)" % out)


def train_globals():
    """train.py's module globals, found up the stack (None outside its training loop)."""
    frame = sys._getframe(1)
    while frame is not None:
        if "iter_num" in frame.f_globals and "max_iters" in frame.f_globals:
            return frame.f_globals
        frame = frame.f_back
    return None


class Recorder:
    def __init__(self):
        # One process writes the log: rank 0 under torchrun, the only one otherwise.
        self.log = zerosim_state.StateLog(None if os.environ.get("RANK", "0") == "0" else "")
        self.loss = None  # the last loss GradScaler.scale saw (a detached tensor)
        self.pending = None  # (step, loss, components) of the last step, not yet written

    def write(self, checkpoint):
        if self.pending is not None:
            step, loss, components = self.pending
            self.log.step(step, loss, components, checkpoint=checkpoint)
            self.pending = None

    def after_step(self, optimizer, args, kwargs):
        names = train_globals()
        if names is None:
            return
        self.write(checkpoint=False)
        model = names.get("raw_model")  # train.py's unwrapped model (DDP and compile aside)
        components = zerosim_state.torch_components(model, optimizer, rng=False)
        self.pending = (names["iter_num"] + 1, float(self.loss), components)

    def after_save(self, obj):
        if (isinstance(obj, dict) and "iter_num" in obj and self.pending is not None
                and self.pending[0] == obj["iter_num"]):
            self.write(checkpoint=True)


def install(recorder):
    import torch

    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(recorder.after_step)

    def keeping_loss(scale):
        def wrapper(self, outputs, *args, **kwargs):
            if isinstance(outputs, torch.Tensor):
                recorder.loss = outputs.detach()
            return scale(self, outputs, *args, **kwargs)
        return wrapper

    # torch.cuda.amp.GradScaler (nanoGPT's) subclasses torch.amp.GradScaler in torch 2.x and
    # inherits its scale: wrap each class that defines scale itself (a subclass's scale that
    # calls the base's would keep the same loss twice, harmlessly).
    for owner in (torch.amp, getattr(torch.cuda, "amp", None)):
        cls = getattr(owner, "GradScaler", None)
        if cls is not None and "scale" in cls.__dict__:
            cls.scale = keeping_loss(cls.__dict__["scale"])

    save = torch.save

    def saving(obj, *args, **kwargs):
        result = save(obj, *args, **kwargs)
        recorder.after_save(obj)
        return result

    torch.save = saving


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--make-data":
        return make_data(sys.argv[2])
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: nanogpt_run.py NANOGPT_DIR [--key=value ...] | nanogpt_run.py --make-data NANOGPT_DIR")
    directory = os.path.abspath(sys.argv[1])
    if not os.path.isfile(os.path.join(directory, "train.py")):
        sys.exit("nanogpt_run: no train.py in %s" % directory)
    recorder = Recorder()
    install(recorder)
    os.chdir(directory)
    sys.path.insert(0, directory)
    sys.argv = ["train.py", *sys.argv[2:]]
    try:
        runpy.run_path(os.path.join(directory, "train.py"), run_name="__main__")
    finally:
        recorder.write(checkpoint=False)


if __name__ == "__main__":
    main()
