"""Lightning 2.x's fit loop, reduced to the order the callbacks see: on_train_batch_start;
training_step (its returned loss), backward, and on the last batch of an accumulation the
optimizer step, scheduler step and global_step += 1; on_train_batch_end (the user's callbacks,
then ModelCheckpoint, which Lightning runs last: every `save_every` steps it calls
on_save_checkpoint while it builds the checkpoint, then writes it); on_train_end."""
import os

import torch


class Trainer:
    def __init__(self, max_steps, save_every, directory, accumulation=1, callbacks=None):
        self.max_steps, self.save_every, self.directory = max_steps, save_every, directory
        self.accumulation = accumulation
        self.callbacks = list(callbacks or [])
        self.global_step = 0
        self.is_global_zero = True
        self.optimizers = []
        self.lr_scheduler_configs = []

    def save_checkpoint(self, pl_module):
        checkpoint = {"state_dict": pl_module.state_dict(), "global_step": self.global_step}
        for callback in self.callbacks:
            callback.on_save_checkpoint(self, pl_module, checkpoint)
        torch.save(checkpoint, os.path.join(self.directory, "step=%d.ckpt" % self.global_step))

    def fit(self, pl_module):
        optimizer, scheduler = pl_module.configure_optimizers()
        self.optimizers = [optimizer]
        self.lr_scheduler_configs = [type("SchedulerConfig", (), {"scheduler": scheduler})()]
        batch_idx = 0
        while self.global_step < self.max_steps:
            for callback in self.callbacks:
                callback.on_train_batch_start(self, pl_module, None, batch_idx)
            loss = pl_module.training_step(batch_idx)
            (loss / self.accumulation).backward()
            if (batch_idx + 1) % self.accumulation == 0:
                optimizer.step()
                optimizer.zero_grad()
                scheduler.step()
                self.global_step += 1
            for callback in self.callbacks:
                callback.on_train_batch_end(self, pl_module, {"loss": loss.detach()}, None, batch_idx)
            if (batch_idx + 1) % self.accumulation == 0 and self.global_step % self.save_every == 0:
                self.save_checkpoint(pl_module)  # ModelCheckpoint, run after every other callback
            batch_idx += 1
        for callback in self.callbacks:
            callback.on_train_end(self, pl_module)
