#!/usr/bin/env python3
"""zerosim_state's framework callbacks and the torch hook's framework recognition, on a real torch
and the test doubles of the Hugging Face and Lightning Trainers (tests/data/fake_frameworks/).

    python3 tests/python/callbacks_test.py        (a python3 that imports torch)
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = os.path.join(ROOT, "python")
FAKES = os.path.join(ROOT, "tests", "data", "fake_frameworks")
sys.path[:0] = [PYTHON, FAKES]

import torch  # noqa: E402

import zerosim_state  # noqa: E402


class LossModel(torch.nn.Module):
    """Returns a dict with "loss", as a Hugging Face model given labels does."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, inputs, labels):
        return {"loss": torch.nn.functional.mse_loss(self.linear(inputs).squeeze(1), labels)}


def read_log(path):
    with open(path) as log:
        return [json.loads(line) for line in log]


class HuggingFaceCallback(unittest.TestCase):
    def train(self, directory, accumulation=1, rank_zero=True):
        from transformers import Trainer
        from zerosim_state.huggingface import ZerosimCallback
        log = os.path.join(directory, "state.jsonl")
        model = LossModel()
        trainer = Trainer(model, directory, max_steps=4, save_steps=2, accumulation=accumulation)
        trainer.state.is_world_process_zero = rank_zero
        trainer.add_callback(ZerosimCallback(log))
        losses = []
        model.register_forward_hook(lambda module, args, output: losses.append(float(output["loss"]))
                                    if module.training else None)
        trainer.train()
        return (read_log(log) if os.path.exists(log) else []), losses

    def test_a_line_per_step_marked_where_on_save_came(self):
        with tempfile.TemporaryDirectory() as directory:
            lines, losses = self.train(directory)
        self.assertEqual([line["step"] for line in lines], [1, 2, 3, 4])
        self.assertEqual([line.get("checkpoint", False) for line in lines], [False, True, False, True])
        # The training forward's loss, not the evaluation's (its labels are 100 away).
        self.assertEqual([line["loss"] for line in lines], losses)
        for line in lines:
            self.assertTrue({"params", "optimizer", "scheduler", "rng_torch"} <= set(line["components"]), line)
        self.assertEqual(len({line["components"]["params"] for line in lines}), 4)

    def test_the_loss_of_an_accumulated_step_is_the_mean_of_its_micro_batches(self):
        with tempfile.TemporaryDirectory() as directory:
            lines, losses = self.train(directory, accumulation=2)
        self.assertEqual(len(lines), 4)
        self.assertEqual([line["loss"] for line in lines],
                         [(losses[i] + losses[i + 1]) / 2 for i in range(0, len(losses), 2)])

    def test_a_rank_other_than_zero_writes_nothing(self):
        with tempfile.TemporaryDirectory() as directory:
            lines, _ = self.train(directory, rank_zero=False)
        self.assertEqual(lines, [])


class LightningModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3, 1)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-2)
        return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)

    def training_step(self, batch_idx):
        inputs = torch.randn(4, 3, generator=torch.Generator().manual_seed(batch_idx))
        return torch.nn.functional.mse_loss(self.linear(inputs).squeeze(1), inputs.sum(dim=1))


class LightningCallback(unittest.TestCase):
    def test_a_line_per_optimizer_step_marked_by_the_checkpoint_written_before_it(self):
        from lightning.pytorch import Trainer
        from zerosim_state.lightning import ZerosimCallback
        with tempfile.TemporaryDirectory() as directory:
            log = os.path.join(directory, "state.jsonl")
            module = LightningModule()
            written_at_save = []

            class Watch(ZerosimCallback):
                def on_save_checkpoint(self, trainer, pl_module, checkpoint):
                    super().on_save_checkpoint(trainer, pl_module, checkpoint)
                    written_at_save.append(len(read_log(log)) if os.path.exists(log) else 0)

            Trainer(max_steps=4, save_every=2, directory=directory, accumulation=2,
                    callbacks=[Watch(log)]).fit(module)
            lines = read_log(log)
        self.assertEqual([line["step"] for line in lines], [1, 2, 3, 4])
        self.assertEqual([line.get("checkpoint", False) for line in lines], [False, True, False, True])
        # While step 2's checkpoint is being built its line is not yet written: only step 1's.
        self.assertEqual(written_at_save, [1, 3])
        for line in lines:
            self.assertTrue({"params", "optimizer", "scheduler", "rng_torch"} <= set(line["components"]), line)


def run_under_hook(directory, program):
    """`program` in a fresh interpreter started as `zerosim exec --hooks torch` starts one."""
    script = os.path.join(directory, "program.py")
    with open(script, "w") as file:
        file.write(textwrap.dedent(program))
    environment = dict(os.environ, ZEROSIM_HOOKS="torch", ZEROSIM_STATE_LOG=os.path.join(directory, "state.jsonl"),
                       PYTHONPATH=os.pathsep.join([os.path.join(PYTHON, "hooks"), FAKES, HERE]))
    done = subprocess.run([sys.executable, script, directory], env=environment, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError("the program failed: %s" % done.stderr)
    path = os.path.join(directory, "state.jsonl")
    return (read_log(path) if os.path.exists(path) else []), done.stderr


class TorchHookFrameworks(unittest.TestCase):
    def test_the_hugging_face_trainer_is_recognised_and_its_on_save_marks_the_step(self):
        with tempfile.TemporaryDirectory() as directory:
            lines, _ = run_under_hook(directory, """
                import sys, torch
                from callbacks_test import LossModel
                from transformers import Trainer, TrainerCallback

                class SavesSomethingElse(TrainerCallback):
                    def on_step_end(self, args, state, control, **kwargs):
                        torch.save({"step": state.global_step}, sys.argv[1] + "/extra.pt")

                trainer = Trainer(LossModel(), sys.argv[1], max_steps=4, save_steps=2)
                trainer.add_callback(SavesSomethingElse())
                trainer.train()
            """)
        self.assertEqual([line["step"] for line in lines], [1, 2, 3, 4])
        # A torch.save of something else on every step marks none: the Trainer's on_save does.
        self.assertEqual([line.get("checkpoint", False) for line in lines], [False, True, False, True])
        # The scheduler is built on a wrapper of the optimizer that steps, as accelerate's is.
        for line in lines:
            self.assertIn("scheduler", line["components"], line)

    def test_lightning_is_recognised_and_its_checkpoints_mark_the_step(self):
        with tempfile.TemporaryDirectory() as directory:
            lines, _ = run_under_hook(directory, """
                import sys, torch
                from callbacks_test import LightningModule
                from lightning.pytorch import Trainer

                class SavesSomethingElse(LightningModule):
                    def training_step(self, batch_idx):
                        torch.save({"batch": batch_idx}, sys.argv[1] + "/extra.pt")
                        return super().training_step(batch_idx)

                Trainer(max_steps=4, save_every=2, directory=sys.argv[1]).fit(SavesSomethingElse())
            """)
        self.assertEqual([line["step"] for line in lines], [1, 2, 3, 4])
        # A torch.save in every training_step marks none: Lightning's on_save_checkpoint does.
        self.assertEqual([line.get("checkpoint", False) for line in lines], [False, True, False, True])

    def test_a_program_that_writes_its_own_log_is_left_to_it(self):
        with tempfile.TemporaryDirectory() as directory:
            lines, stderr = run_under_hook(directory, """
                import torch, zerosim_state
                log = zerosim_state.StateLog()
                model = torch.nn.Linear(2, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for step in range(1, 4):
                    loss = model(torch.ones(1, 2)).sum()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    log.step(step * 10, loss.item(), {"mine": str(step)})
            """)
        self.assertEqual([line["step"] for line in lines], [10, 20, 30])
        self.assertIn("writes the state log itself", stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
