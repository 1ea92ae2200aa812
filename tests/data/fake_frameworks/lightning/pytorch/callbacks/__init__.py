class Callback:
    """The real base class: every hook a no-op."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        pass

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        pass

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        pass

    def on_train_end(self, trainer, pl_module):
        pass
