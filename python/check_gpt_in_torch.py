#!/usr/bin/env python3
"""Holds zerosim's transformer to Hugging Face's GPT2LMHeadModel under PyTorch autograd.

Reads what `zerosim gpt-check-export DIR` wrote (model.safetensors: the weights under their
Hugging Face names; batch.json: the tokens; gradients.safetensors: zerosim's gradients of the mean
loss), loads the weights into a GPT2LMHeadModel of the same shape (gelu_new, layer_norm_epsilon
1e-5, no dropout, lm_head tied to wte), computes the same loss and its gradients in fp32 on each
device asked for (TF32 off), and prints, per device, the loss beside zerosim's and a histogram of
the ULP distances between zerosim's and PyTorch's gradients (all parameters together, and the
worst parameter by relative error). Exits 1 when the loss is more than 4 ulp from zerosim's or a
gradient departs by more than 1e-5 of its norm (a wrong formula, not rounding: measured at about
1e-6), 2 on bad input.

    python3 python/check_gpt_in_torch.py DIR [cpu] [cuda]
"""
import json
import sys

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel


def ordered(bits):
    # float32 bits as integers whose order is the floats' order (for ULP distances).
    bits = bits.astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def ulp_distances(a, b):
    return np.abs(ordered(a.view(np.int32)) - ordered(b.view(np.int32)))


def histogram(distances):
    edges = [(0, 0, "0"), (1, 1, "1"), (2, 3, "2-3"), (4, 15, "4-15"), (16, 255, "16-255"), (256, 1 << 62, ">=256")]
    total = distances.size
    return ", ".join(f"{label}: {np.count_nonzero((distances >= low) & (distances <= high)) / total:.2%}" for low, high, label in edges)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory = argv[1]
    devices = argv[2:] or ["cpu"]
    try:
        with open(f"{directory}/batch.json") as handle:
            batch = json.load(handle)
        weights = load_file(f"{directory}/model.safetensors")
        expected = load_file(f"{directory}/gradients.safetensors")
        for key in ("vocab", "block", "embd", "layers", "heads", "sequences", "length", "tokens", "loss"):
            if key not in batch:
                raise KeyError(f"batch.json lacks {key}")
    except (OSError, ValueError, KeyError) as error:
        print(f"check_gpt_in_torch: {directory}: {error}", file=sys.stderr)
        return 2
    config = GPT2Config(vocab_size=batch["vocab"], n_positions=batch["block"], n_embd=batch["embd"],
                        n_layer=batch["layers"], n_head=batch["heads"], activation_function="gelu_new",
                        layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    failed = False
    for device in devices:
        model = GPT2LMHeadModel(config).to(torch.float32)
        missing, unexpected = model.load_state_dict(weights, strict=False)
        assert not unexpected, unexpected
        assert all(name == "lm_head.weight" or name.endswith((".attn.bias", ".attn.masked_bias")) for name in missing), missing
        assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "lm_head is not tied"
        model.to(device).train()
        length = batch["length"]
        tokens = torch.tensor(batch["tokens"], dtype=torch.long, device=device).view(batch["sequences"], length + 1)
        logits = model(input_ids=tokens[:, :length]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, batch["vocab"]), tokens[:, 1:].reshape(-1))
        loss.backward()
        zerosim_loss = np.float32(batch["loss"])
        torch_loss = np.float32(loss.item())
        loss_ulps = int(ulp_distances(np.array([zerosim_loss]), np.array([torch_loss]))[0])
        print(f"{device}: loss zerosim {zerosim_loss:.9g}, torch {torch_loss:.9g} ({loss_ulps} ulp)")
        if loss_ulps > 4:
            print(f"  the loss is {loss_ulps} ulp from zerosim's", file=sys.stderr)
            failed = True
        all_distances = []
        worst = ("", 0.0)
        for name, parameter in model.named_parameters():
            ours = expected[name].numpy().reshape(-1)
            theirs = parameter.grad.detach().to("cpu").numpy().reshape(-1).astype(np.float32)
            all_distances.append(ulp_distances(ours, theirs))
            relative = float(np.linalg.norm(ours - theirs) / max(np.linalg.norm(theirs), 1e-30))
            if relative > worst[1]:
                worst = (name, relative)
            if relative > 1e-5:
                print(f"  {name}: relative difference {relative:.3g}", file=sys.stderr)
                failed = True
        distances = np.concatenate(all_distances)
        print(f"  gradients, {distances.size} elements, ULP distance: {histogram(distances)}; "
              f"worst tensor {worst[0]} (relative {worst[1]:.3g})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
