#!/usr/bin/env python3
"""A Hugging Face `Trainer` run for `zerosim exec` on the GPU machine: a tiny GPT-2 made from a
config (no download), trained on fixed random token sequences, checkpointing the Trainer's own
way (CKPT/checkpoint-N: model.safetensors, optimizer.pt, scheduler.pt, rng_state.pth,
trainer_state.json, ...) every --save-every steps.

The state log (python/zerosim_state.py): the line of global step N is made at on_step_end and held;
it is written at on_save with "checkpoint": true (the Trainer calls on_save once the checkpoint's
files are written), else at the next on_step_begin or at on_train_end. Components: the model, the
optimizer and the LR scheduler; not the RNG (python's `random` state is not restored by design,
so it would differ after every resume; the Trainer restores torch's from rng_state.pth).

    python3 hf_trainer.py --ckpt DIR [--steps 12] [--save-every 4] [--resume] [--cpu]
                          [--sequences 64] [--full-determinism]

--resume resumes from transformers.trainer_utils.get_last_checkpoint(DIR) when it finds one, else
trains from scratch. --sequences: the data set's size; at batch 4, the default 64 keeps 12 steps
in one epoch, fewer (e.g. 24) make the resume cross epochs. --full-determinism: the Trainer's
full_determinism (deterministic CUDA kernels; try it when every resume diverges by a few bits).
Under exec, from the repository root:

    zerosim exec --watch /tmp/hfck --resume-command \
        "python3 examples/exec/hf_trainer.py --ckpt /tmp/hfck --resume" \
        --crash-points 16 --states-per-point 2 -- python3 examples/exec/hf_trainer.py --ckpt /tmp/hfck
"""
import argparse
import dataclasses
import os
import sys

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import zerosim_state  # noqa: E402

SEED = 1234
SEQUENCE_LENGTH = 32


class TokenSequences(torch.utils.data.Dataset):
    """Fixed random token sequences: the same in every run (their own seeded generator)."""

    def __init__(self, count, vocab_size):
        generator = torch.Generator().manual_seed(SEED)
        self.tokens = torch.randint(0, vocab_size, (count, SEQUENCE_LENGTH), generator=generator)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, index):
        return {"input_ids": self.tokens[index], "labels": self.tokens[index]}


class LossKeepingTrainer(Trainer):
    """Keeps the loss of the step (this run has no gradient accumulation: one compute_loss a step)."""

    last_loss = None

    def compute_loss(self, model, inputs, *args, **kwargs):
        result = super().compute_loss(model, inputs, *args, **kwargs)
        loss = result[0] if isinstance(result, tuple) else result
        self.last_loss = loss.detach()
        return result


class StateLogCallback(TrainerCallback):
    def __init__(self):
        self.trainer = None  # set once the Trainer exists
        self.log = zerosim_state.StateLog()
        self.pending = None  # (step, loss, components, capture) of the last step, not yet written

    def components(self):
        trainer = self.trainer
        try:
            return zerosim_state.torch_components(trainer.model, trainer.optimizer, trainer.lr_scheduler, rng=False)
        except TypeError:  # a scheduler state the digest cannot read: leave the scheduler out
            return zerosim_state.torch_components(trainer.model, trainer.optimizer, rng=False)

    def write(self, checkpoint):
        if self.pending is not None:
            step, loss, components, capture = self.pending
            self.log.step(step, loss, components, checkpoint=checkpoint, capture=capture)
            self.pending = None

    def on_step_begin(self, args, state, control, **kwargs):
        self.write(checkpoint=False)

    def on_step_end(self, args, state, control, **kwargs):
        self.write(checkpoint=False)
        if state.is_world_process_zero:
            # The parameters as they are now (references: the line is written before the next step).
            capture = {name: tensor for name, tensor in self.trainer.model.state_dict().items()
                       if tensor.is_floating_point()}
            self.pending = (state.global_step, float(self.trainer.last_loss), self.components(), capture)

    def on_save(self, args, state, control, **kwargs):
        if self.pending is not None and self.pending[0] == state.global_step:
            self.write(checkpoint=True)

    def on_train_end(self, args, state, control, **kwargs):
        self.write(checkpoint=False)


def training_arguments(arguments):
    wanted = dict(output_dir=arguments.ckpt, max_steps=arguments.steps, save_strategy="steps",
                  save_steps=arguments.save_every, per_device_train_batch_size=4, learning_rate=1e-3,
                  logging_steps=1, report_to=[], seed=SEED, dataloader_num_workers=0, save_safetensors=True,
                  disable_tqdm=True)
    if arguments.cpu:
        wanted["use_cpu"] = True
    if arguments.full_determinism:
        wanted["full_determinism"] = True
    # transformers 5 dropped save_safetensors (safetensors always): pass what this version takes.
    accepted = {field.name for field in dataclasses.fields(TrainingArguments)}
    for name in sorted(set(wanted) - accepted):
        if name in ("use_cpu", "full_determinism"):
            sys.exit("hf_trainer: this transformers (%s) has no TrainingArguments.%s" % (transformers.__version__, name))
        print("hf_trainer: this transformers (%s) has no TrainingArguments.%s; left out" % (transformers.__version__, name))
    return TrainingArguments(**{name: value for name, value in wanted.items() if name in accepted})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--save-every", type=int, default=4)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--full-determinism", action="store_true")
    arguments = parser.parse_args()

    transformers.set_seed(SEED)  # the same initial model in every run (a resume overwrites it)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=64)
    model = GPT2LMHeadModel(config)
    callback = StateLogCallback()
    trainer = LossKeepingTrainer(model=model, args=training_arguments(arguments),
                                 train_dataset=TokenSequences(arguments.sequences, config.vocab_size),
                                 callbacks=[callback])
    callback.trainer = trainer

    last = get_last_checkpoint(arguments.ckpt) if arguments.resume and os.path.isdir(arguments.ckpt) else None
    if last is not None:
        print("hf_trainer: resuming from %s" % last)
        trainer.train(resume_from_checkpoint=True)
    else:
        trainer.train()


if __name__ == "__main__":
    main()
