"""Step 2 of the quantized-model oracle (tests/quant/test_quant_model.sh):
transformers' logits, final hidden states and greedy tokens of the folder
dequant_fixture.py made, for the inputs of the original fixture's reference
(its reference.safetensors and reference.json), written as a reference file
model_ref_test reads with --ref.

    python hf_quant_refs.py DEQUANT_DIR FIXTURE OUT.safetensors
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file


def main():
    d, fixture, out = sys.argv[1:4]
    ref = load_file(os.path.join(fixture, "reference.safetensors"))
    meta = json.load(open(os.path.join(fixture, "reference.json")))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    model.eval()
    refs = {}
    for side in ("left", "right"):
        ids, mask = ref.get(f"input_ids_{side}"), ref.get(f"attention_mask_{side}")
        if ids is None:
            continue
        # As tests/models/make_fixtures.py: the left-padded batch with explicit
        # positions (the mask's cumulative sum), the right-padded one without.
        kw = {}
        if side == "left":
            kw["position_ids"] = (mask.long().cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            o = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, **kw)
        refs[f"input_ids_{side}"] = ids
        refs[f"attention_mask_{side}"] = mask
        refs[f"logits_{side}"] = o.logits.float().contiguous()
        refs[f"hidden_{side}"] = o.hidden_states[-1].float().contiguous()
    eos = meta.get("generation_eos_token_id", -1)
    for i, p in enumerate(meta.get("prompts", [])):
        if f"greedy_{i}" not in ref:
            continue
        ids = torch.tensor([p])
        with torch.no_grad():
            g = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=12, eos_token_id=eos if eos >= 0 else None,
                               pad_token_id=eos if eos >= 0 else 0)
        refs[f"greedy_{i}"] = g[0].clone()
    save_file(refs, out)
    print(f"wrote {out}: {sorted(refs)}")


if __name__ == "__main__":
    main()
