"""Optimizer with torch's global step post-hooks (register_optimizer_step_post_hook)."""
_post_hooks = []


def register_optimizer_step_post_hook(hook):
    _post_hooks.append(hook)


class Optimizer:
    def __init__(self, params, defaults):
        self.param_groups = [dict(defaults, params=list(params))]
        self.state = {}

    def state_dict(self):
        return {"state": {i: dict(self.state.get(p, {})) for i, p in enumerate(self.param_groups[0]["params"])},
                "param_groups": [{key: value for key, value in group.items() if key != "params"}
                                 for group in self.param_groups]}

    def load_state_dict(self, state_dict):
        for i, parameter in enumerate(self.param_groups[0]["params"]):
            if i in state_dict["state"]:
                self.state[parameter] = dict(state_dict["state"][i])

    def _after_step(self):
        for hook in _post_hooks:
            hook(self, (), {})
