# Loads a transformer checkpoint exported by `zerosim ckpt export` into Hugging Face's
# GPT2LMHeadModel with strict key checking, and checks what the export promises: every key of
# the model's state dict present with its shape (the tied head under lm_head.weight too, equal to
# transformer.wte.weight), the head tied again after the load, and a finite loss on a batch.
# Exit 0 on success, 1 on a failed check, 2 on bad input.
#   python3 python/check_gpt_export_in_hf.py EXPORT.safetensors gpt:layers=L,embd=E,heads=H,vocab=V,block=B
import sys

import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

if len(sys.argv) != 3 or not sys.argv[2].startswith("gpt:"):
    print(__doc__ or "usage: check_gpt_export_in_hf.py EXPORT.safetensors gpt:...", file=sys.stderr)
    sys.exit(2)
shape = {k: int(v) for k, v in (item.split("=") for item in sys.argv[2][4:].split(","))}
config = GPT2Config(vocab_size=shape["vocab"], n_positions=shape["block"], n_embd=shape["embd"], n_layer=shape["layers"],
                    n_head=shape["heads"], activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
                    embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True)
model = GPT2LMHeadModel(config)
state = load_file(sys.argv[1])
expected = {k: v.shape for k, v in model.state_dict().items()}
failures = []
for key, tensor_shape in expected.items():
    if key not in state:
        failures.append(f"missing {key}")
    elif state[key].shape != tensor_shape:
        failures.append(f"{key}: shape {tuple(state[key].shape)}, expected {tuple(tensor_shape)}")
for key in state:
    if key not in expected:
        failures.append(f"unexpected {key}")
if not failures and not torch.equal(state["lm_head.weight"], state["transformer.wte.weight"]):
    failures.append("lm_head.weight differs from transformer.wte.weight")
if not failures:
    model.load_state_dict(state, strict=True)
    model.tie_weights()
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        failures.append("the head is not tied to the embedding after the load")
    tokens = torch.arange(min(8, shape["block"]) + 1).remainder(shape["vocab"]).unsqueeze(0)
    loss = model(input_ids=tokens[:, :-1], labels=tokens[:, :-1]).loss
    if not torch.isfinite(loss):
        failures.append(f"loss {loss.item()} is not finite")
    print(f"loaded {len(state)} tensors strictly into GPT2LMHeadModel ({sum(p.numel() for p in model.parameters())} "
          f"parameters), head tied, loss on a batch {loss.item():.6f}")
for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)
