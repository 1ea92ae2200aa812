"""A test double of lightning.pytorch: only what zerosim's Lightning callbacks use."""
from lightning.pytorch.callbacks import Callback  # noqa: F401
from lightning.pytorch.trainer.trainer import Trainer  # noqa: F401
