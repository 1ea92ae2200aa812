from .optimizer import Optimizer


class SGD(Optimizer):
    """SGD with momentum; each parameter's state keeps a step count, as torch's Adam does."""

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    def step(self):
        for parameter in self.param_groups[0]["params"]:
            state = self.state.setdefault(parameter, {"step": 0, "momentum": [0.0] * parameter.numel()})
            state["step"] += 1
            for i, gradient in enumerate(parameter.grad):
                state["momentum"][i] = 0.9 * state["momentum"][i] + gradient
                parameter.values[i] -= self.param_groups[0]["lr"] * state["momentum"][i]
        self._after_step()
