#!/usr/bin/env python3
"""A Hugging Face `Trainer` run for `zerosim exec` on the GPU machine: a tiny GPT-2 made from a
config (no download), trained on fixed random token sequences, checkpointing the Trainer's own
way (CKPT/checkpoint-N: model.safetensors, optimizer.pt, scheduler.pt, rng_state.pth,
trainer_state.json, ...) every --save-every steps.

Nothing of zerosim is in it unless --zerosim-callback is given: `zerosim exec --hooks torch` writes
its state log from outside. With --zerosim-callback it writes the log itself, in the one line a
user would add (zerosim_state.huggingface.ZerosimCallback; zerosim_state is found installed, or in
this repository's python/).

    python3 hf_trainer.py --ckpt DIR [--steps 12] [--save-every 4] [--resume] [--cpu]
                          [--sequences 64] [--full-determinism] [--zerosim-callback]

--resume resumes from transformers.trainer_utils.get_last_checkpoint(DIR) when it finds one, else
trains from scratch. --sequences: the data set's size; at batch 4, the default 64 keeps 12 steps
in one epoch, fewer (e.g. 24) make the resume cross epochs. --full-determinism: the Trainer's
full_determinism (deterministic CUDA kernels; try it when every resume diverges by a few bits).
Under exec, from the repository root:

    zerosim exec --hooks torch --watch /tmp/hfck --resume-command \
        "python3 examples/exec/hf_trainer.py --ckpt /tmp/hfck --resume" \
        --crash-points 16 --states-per-point 2 -- python3 examples/exec/hf_trainer.py --ckpt /tmp/hfck
"""
import argparse
import dataclasses
import os
import sys

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

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
    parser.add_argument("--zerosim-callback", action="store_true")
    arguments = parser.parse_args()

    transformers.set_seed(SEED)  # the same initial model in every run (a resume overwrites it)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=64)
    model = GPT2LMHeadModel(config)
    trainer = Trainer(model=model, args=training_arguments(arguments),
                      train_dataset=TokenSequences(arguments.sequences, config.vocab_size))
    if arguments.zerosim_callback:
        try:
            from zerosim_state.huggingface import ZerosimCallback
        except ImportError:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
            from zerosim_state.huggingface import ZerosimCallback
        trainer.add_callback(ZerosimCallback())

    last = get_last_checkpoint(arguments.ckpt) if arguments.resume and os.path.isdir(arguments.ckpt) else None
    if last is not None:
        print("hf_trainer: resuming from %s" % last)
        trainer.train(resume_from_checkpoint=True)
    else:
        trainer.train()


if __name__ == "__main__":
    main()
