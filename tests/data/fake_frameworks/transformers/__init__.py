"""A test double of transformers: only what zerosim's Trainer callbacks use."""
from transformers.trainer_callback import TrainerCallback  # noqa: F401
from transformers.trainer import Trainer  # noqa: F401
