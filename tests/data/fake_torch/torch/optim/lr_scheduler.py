class LRScheduler:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.last_epoch = 0

    def step(self):
        self.last_epoch += 1

    def state_dict(self):
        return {"last_epoch": self.last_epoch}

    def load_state_dict(self, state):
        self.last_epoch = state["last_epoch"]
