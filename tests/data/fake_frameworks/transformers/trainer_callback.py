class TrainerCallback:
    """The real base class: every event a no-op."""

    def on_train_begin(self, args, state, control, **kwargs):
        pass

    def on_step_begin(self, args, state, control, **kwargs):
        pass

    def on_step_end(self, args, state, control, **kwargs):
        pass

    def on_save(self, args, state, control, **kwargs):
        pass

    def on_train_end(self, args, state, control, **kwargs):
        pass


class TrainerState:
    def __init__(self):
        self.global_step = 0
        self.is_world_process_zero = True
