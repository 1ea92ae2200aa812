"""The state log of a PyTorch Lightning run, in one line of the training script:

    from zerosim_state.lightning import ZerosimCallback
    trainer = Trainer(..., callbacks=[ZerosimCallback()])

Works with `lightning.pytorch` and with the older `pytorch_lightning` package, whichever is
imported (lightning.pytorch first).

After each optimizer step (trainer.global_step moved on) the callback holds the step's line:
  loss        the loss training_step returned (its "loss" entry, or the tensor itself)
  components  params (the LightningModule's state_dict), optimizer (every optimizer's
              state_dict), scheduler (every LR scheduler's), scaler (the precision plugin's
              GradScaler, when it has one), and the random generators
              (zerosim_state.rng_components)
and writes it when the next batch begins or training ends, with "checkpoint": true when a
checkpoint of that step was made in between (`on_save_checkpoint`). Lightning calls that hook
while it builds the checkpoint, before the file is written; the line is written only once the
program goes on, when the save has returned. With an asynchronous checkpoint plugin
(AsyncCheckpointIO) the save may still be under way then: the mark would come too early.
Without ZEROSIM_STATE_LOG it writes nothing; on ranks other than 0 it writes nothing.

What it cannot see: a loss training_step does not return (manual optimization returning None:
loss 0, said once on stderr), a data loader's position, a save after `fit` returned.
"""
import sys

try:
    from lightning.pytorch import Callback
except ImportError:
    from pytorch_lightning import Callback

import zerosim_state

__all__ = ["ZerosimCallback"]


def _loss_value(outputs):
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    if loss is None or not hasattr(loss, "numel") or loss.numel() != 1:
        return None
    return float(loss.detach().double().item())


class ZerosimCallback(Callback):
    def __init__(self, log_path=None):
        self.held = zerosim_state.HeldStep(zerosim_state.StateLog(log_path))
        self.last_step = None
        self.warned = False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.held.write()
        if self.last_step is None:
            self.last_step = trainer.global_step  # the step the run starts from (0, or a resume's)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == self.last_step or not trainer.is_global_zero:
            return  # a batch of gradient accumulation that did not step, or another rank
        self.last_step = step
        loss = _loss_value(outputs)
        if loss is None:
            loss = 0.0
            if not self.warned:
                self.warned = True
                sys.stderr.write("zerosim_state: training_step returned no loss; the state log logs loss 0\n")
        components = zerosim_state.torch_components(pl_module)  # params and the generators
        components["optimizer"] = zerosim_state.digest_value([optimizer.state_dict() for optimizer in trainer.optimizers])
        schedulers = [config.scheduler for config in getattr(trainer, "lr_scheduler_configs", [])]
        if schedulers:
            try:
                components["scheduler"] = zerosim_state.digest_value([scheduler.state_dict() for scheduler in schedulers])
            except TypeError as error:
                sys.stderr.write("zerosim_state: the LR schedulers are not logged: %s\n" % error)
        scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
        if scaler is not None:
            components["scaler"] = zerosim_state.digest_value(scaler.state_dict())
        capture = lambda: {name: tensor for name, tensor in pl_module.state_dict().items()  # noqa: E731
                           if tensor.is_floating_point()}
        self.held.hold(step, loss, components, capture=capture)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        if self.held.held_step() == trainer.global_step:
            self.held.mark_checkpoint()

    def on_train_end(self, trainer, pl_module):
        self.held.write()
