"""The state log of a Hugging Face `Trainer` run, in one line of the training script:

    from zerosim_state.huggingface import ZerosimCallback
    trainer.add_callback(ZerosimCallback())          # or Trainer(..., callbacks=[ZerosimCallback()])

After each optimizer step (the Trainer's global step) the callback holds the step's line:
  loss        the mean of the losses the model's forward returned in training mode during the
              step (its output's "loss", which the Trainer's compute_loss uses when the batch has
              labels); several with gradient accumulation
  components  params (the model's state_dict), optimizer, scheduler (when its state can be
              digested), and the random generators (zerosim_state.rng_components)
and writes it when the next step begins, with "checkpoint": true when `on_save` came in between:
the Trainer calls it once every file of the checkpoint is written. Without ZEROSIM_STATE_LOG it
writes nothing. On a launcher's ranks other than 0 it writes nothing (the ranks of a data-parallel
run hold the same state).

What it cannot see: a loss the model does not return (a custom compute_loss, a label smoother:
the line then logs loss 0, said once on stderr), a data loader's position.
"""
import sys

from transformers import TrainerCallback

import zerosim_state

__all__ = ["ZerosimCallback"]


class ZerosimCallback(TrainerCallback):
    def __init__(self, log_path=None):
        self.held = zerosim_state.HeldStep(zerosim_state.StateLog(log_path))
        self.losses = []
        self.warned = False
        self.hooked_model = None

    def _record_loss(self, module, inputs, output):
        if not module.training:
            return  # an evaluation's forward
        loss = output.get("loss") if hasattr(output, "get") else getattr(output, "loss", None)
        if loss is not None and getattr(loss, "numel", lambda: 0)() == 1:
            self.losses.append(float(loss.detach().double().item()))

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is not None and model is not self.hooked_model:
            model.register_forward_hook(self._record_loss)
            self.hooked_model = model

    def on_step_begin(self, args, state, control, **kwargs):
        self.held.write()
        self.losses = []

    def on_step_end(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
        if not state.is_world_process_zero:
            self.losses = []
            return
        if self.losses:
            loss = sum(self.losses) / len(self.losses)
        else:
            loss = 0.0
            if not self.warned:
                self.warned = True
                sys.stderr.write("zerosim_state: the model's forward returned no loss; the state log logs loss 0\n")
        self.losses = []
        components = zerosim_state.torch_components(model, optimizer)
        if lr_scheduler is not None:
            try:
                components["scheduler"] = zerosim_state.digest_value(lr_scheduler.state_dict())
            except TypeError as error:
                sys.stderr.write("zerosim_state: the LR scheduler is not logged: %s\n" % error)
        capture = None
        if model is not None:
            capture = lambda: {name: tensor for name, tensor in model.state_dict().items()  # noqa: E731
                               if tensor.is_floating_point()}
        self.held.hold(state.global_step, loss, components, capture=capture)

    def on_save(self, args, state, control, **kwargs):
        if self.held.held_step() == state.global_step:
            self.held.mark_checkpoint()
            self.held.write()

    def on_train_end(self, args, state, control, **kwargs):
        self.held.write()
