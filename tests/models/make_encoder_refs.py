#!/usr/bin/env python3
"""Writes the backward oracle of the encoder fixture (BERT): for
tests/models/fixtures/bert-tiny, one batch, a gradient of the last hidden
states supplied from outside (as a caller fine-tuning an embedding model
computes it from its own loss), and the gradient of every parameter that
transformers' autograd derives from it, into
bert-tiny/backward_ref.safetensors:

    input_ids       [B, S] int64   right-padded rows
    attention_mask  [B, S] int64   1 = token, 0 = padding
    token_type_ids  [B, S] int64   two segments in row 0
    grad_hidden     [B, S, H] f32  d loss / d last_hidden_state (zero at padding)
    hidden          [B, S, H] f32  last_hidden_state
    grad.<name>     f32            d loss / d parameter (Hugging Face name)

The loss is sum(last_hidden_state * grad_hidden), so its gradient with
respect to the hidden states is grad_hidden itself.

    build/venv-hf/bin/python tests/models/make_encoder_refs.py

and, with --pad, bert-tiny/backward_pad_ref.safetensors: a batch where the
pad id (BERT's word_embeddings have padding_idx = pad_token_id) is also a
real token (input_ids, attention_mask, token_type_ids, grad_hidden as above),
with the word-embedding gradient rows of the batch's ids (grad_rows_ids
[n], grad_rows [n, H]) and the pad row's gradient with padding_idx and with
none (grad_pad_with, grad_pad_without [H]).

Deterministic: fixed generators, one torch thread, f32, eager attention,
model.eval() (no dropout).
"""
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(HERE, "fixtures", "bert-tiny")
B, S = 2, 7
LENGTHS = (7, 5)


def main():
    torch.set_num_threads(1)
    model = transformers.AutoModel.from_pretrained(FOLDER, torch_dtype=torch.float32,
                                                   attn_implementation="eager")
    model.eval()
    cfg = model.config
    g = torch.Generator().manual_seed(2024)
    ids = torch.randint(1, cfg.vocab_size, (B, S), generator=g)
    mask = torch.zeros(B, S, dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1
    ids[mask == 0] = cfg.pad_token_id
    types = torch.zeros(B, S, dtype=torch.long)
    types[0, 4:] = 1
    grad_hidden = torch.randn(B, S, cfg.hidden_size, generator=g) * mask[..., None]
    out = model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    (out * grad_hidden).sum().backward()
    tensors = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types,
               "grad_hidden": grad_hidden.contiguous(), "hidden": out.detach().contiguous()}
    for name, p in model.named_parameters():
        tensors["grad." + name] = (p.grad if p.grad is not None
                                   else torch.zeros_like(p)).detach().contiguous()
    save_file(tensors, os.path.join(FOLDER, "backward_ref.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    print("bert-tiny: %d parameter gradients" % sum(k.startswith("grad.") for k in tensors))


def main_pad():
    torch.set_num_threads(1)
    model = transformers.AutoModel.from_pretrained(FOLDER, torch_dtype=torch.float32,
                                                   attn_implementation="eager")
    model.eval()
    cfg = model.config
    emb = model.get_input_embeddings()
    pad = cfg.pad_token_id
    assert emb.padding_idx == pad, (emb.padding_idx, pad)
    g = torch.Generator().manual_seed(2025)
    ids = torch.randint(1, cfg.vocab_size, (B, S), generator=g)
    mask = torch.zeros(B, S, dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1
    ids[mask == 0] = pad
    ids[0, 2] = pad  # the pad id as a real token
    ids[1, 1] = pad
    types = torch.zeros(B, S, dtype=torch.long)
    types[0, 4:] = 1
    # Zero at padding, as above: the hidden states of padding positions are
    # no output (oslo gives them the last real position, BERT its index).
    grad_hidden = torch.randn(B, S, cfg.hidden_size, generator=g) * mask[..., None]

    def backward():
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        (out * grad_hidden).sum().backward()
        return emb.weight.grad.clone()

    emb.padding_idx = None
    without = backward()[pad]
    emb.padding_idx = pad
    grad = backward()
    uniq = torch.unique(ids)
    tensors = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types,
               "grad_hidden": grad_hidden.contiguous(), "grad_rows_ids": uniq.contiguous(),
               "grad_rows": grad[uniq].contiguous(), "grad_pad_with": grad[pad].contiguous(),
               "grad_pad_without": without.contiguous()}
    save_file(tensors, os.path.join(FOLDER, "backward_pad_ref.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    print("bert-tiny: pad row %d gradient with padding_idx %.3g, without %.3g" %
          (pad, grad[pad].abs().max().item(), without.abs().max().item()))


if __name__ == "__main__":
    if "--pad" in sys.argv[1:]:
        main_pad()
    else:
        main()
