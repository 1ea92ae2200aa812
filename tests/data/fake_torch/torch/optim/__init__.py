from .optimizer import Optimizer  # noqa: F401
from .sgd import SGD  # noqa: F401
from . import lr_scheduler  # noqa: F401

# As torch.optim does, the submodules' names are removed from the package's namespace.
del optimizer, sgd  # noqa: F821
