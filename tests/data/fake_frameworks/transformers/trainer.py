"""The Trainer's order of events, as transformers' _inner_training_loop runs them: on_step_begin;
forward and backward (one per micro-batch); optimizer step, scheduler step, global_step += 1;
on_step_end; then, on a save step, the checkpoint's files and on_save. Like accelerate, it builds
the LR scheduler on a wrapper of the optimizer (AcceleratedOptimizer keeps it as .optimizer)."""
import os

import torch

from transformers.trainer_callback import TrainerState


class WrappedOptimizer:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups

    def step(self):
        self.optimizer.step()

    def zero_grad(self):
        self.optimizer.zero_grad()

    def state_dict(self):
        return self.optimizer.state_dict()


class Trainer:
    def __init__(self, model, output_dir, max_steps, save_steps, accumulation=1, callbacks=None):
        self.model, self.output_dir = model, output_dir
        self.max_steps, self.save_steps, self.accumulation = max_steps, save_steps, accumulation
        self.callbacks = list(callbacks or [])
        self.state = TrainerState()
        self.inner_optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        self.optimizer = WrappedOptimizer(self.inner_optimizer)
        self.lr_scheduler = torch.optim.lr_scheduler.StepLR(self.inner_optimizer, step_size=2, gamma=0.5)
        self.lr_scheduler.optimizer = self.optimizer  # on the wrapper, as the Trainer's is with accelerate

    def add_callback(self, callback):
        self.callbacks.append(callback)

    def _event(self, name, **kwargs):
        for callback in self.callbacks:
            getattr(callback, name)(None, self.state, None, model=self.model, optimizer=self.optimizer,
                                    lr_scheduler=self.lr_scheduler, **kwargs)

    def train(self):
        self._event("on_train_begin")
        while self.state.global_step < self.max_steps:
            self._event("on_step_begin")
            for micro in range(self.accumulation):
                generator = torch.Generator().manual_seed(100 * self.state.global_step + micro)
                inputs = torch.randn(4, 3, generator=generator)
                output = self.model(inputs, labels=inputs.sum(dim=1))
                output["loss"].backward()
            self.model.eval()
            self.model(inputs, labels=inputs.sum(dim=1) + 100.0)  # an evaluation's forward: not a training loss
            self.model.train()
            self.optimizer.step()
            self.lr_scheduler.step()
            self.optimizer.zero_grad()
            self.state.global_step += 1
            self._event("on_step_end")
            if self.state.global_step % self.save_steps == 0:
                directory = os.path.join(self.output_dir, "checkpoint-%d" % self.state.global_step)
                os.makedirs(directory, exist_ok=True)
                torch.save(self.inner_optimizer.state_dict(), os.path.join(directory, "optimizer.pt"))
                torch.save(self.model.state_dict(), os.path.join(directory, "model.pt"))
                self._event("on_save")
        self._event("on_train_end")
