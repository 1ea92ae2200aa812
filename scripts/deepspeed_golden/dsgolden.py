"""Shared plumbing for the DeepSpeed golden-data generators.

The generators execute DeepSpeed's own Python files, loaded by file path from a plain
checkout, so the recorded numbers are DeepSpeed's arithmetic and not a re-implementation.
DeepSpeed itself cannot be imported here (it needs torch), so each generator first puts
the few stand-in modules its target file imports at top level into sys.modules.
"""

import argparse
import importlib.util
import json
import logging
import os
import sys
import types


def parse_args(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("deepspeed_src", help="plain DeepSpeed checkout (the repository root)")
    parser.add_argument("out_json", help="file to write")
    parser.add_argument("commit", help="DeepSpeed commit the checkout holds (recorded in the output)")
    return parser.parse_args()


def ds_path(src, relpath):
    path = os.path.join(src, relpath)
    if not os.path.isfile(path):
        sys.exit(f"error: {path} not found; is {src} a DeepSpeed checkout?")
    return path


def stub_module(name, **attrs):
    """Registers an empty module (a package if it has children) under `name`."""
    mod = types.ModuleType(name)
    mod.__path__ = []  # lets `import name.child` resolve children registered below
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, mod)
    return mod


def load_ds_module(src, relpath, name):
    """Executes DeepSpeed's file `relpath` as module `name` (so relative imports resolve)."""
    spec = importlib.util.spec_from_file_location(name, ds_path(src, relpath))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, mod)
    return mod


class _Collect(logging.Handler):

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def capturing_logger():
    """Stands in for deepspeed.utils.logger; warnings (and worse) are kept in `.collected`.

    DeepSpeed's logger is a plain logging.Logger, so the texts are the same messages."""
    logger = logging.getLogger("zerosim.deepspeed_golden")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = _Collect()
    logger.handlers = [handler]
    logger.collected = handler.records
    return logger


def _dumps(obj, depth):
    # Lists of scalars stay on one line (they are the bulk of the data); containers of
    # containers get one element per line, so diffs between regenerations stay readable.
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        pad = " " * (depth + 1)
        body = ",\n".join(f"{pad}{json.dumps(k)}: {_dumps(obj[k], depth + 1)}" for k in sorted(obj))
        return "{\n" + body + "\n" + " " * depth + "}"
    if isinstance(obj, (list, tuple)) and any(isinstance(x, (dict, list, tuple)) for x in obj):
        pad = " " * (depth + 1)
        body = ",\n".join(pad + _dumps(x, depth + 1) for x in obj)
        return "[\n" + body + "\n" + " " * depth + "]"
    # json writes floats with repr(), the shortest text that reads back to the same double.
    return json.dumps(obj, allow_nan=False, separators=(",", ":"))


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        f.write(_dumps(obj, 0) + "\n")
