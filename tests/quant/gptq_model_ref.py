"""The model-side GPTQ/AWQ check: transformers' forward on the dequantized
weights against oslo's forward on the quantized folders.

Usage: gptq_model_ref.py WORK_DIR TEST_BINARY  (Python with torch and
transformers: the HF test venv; exit 77 without them)

Writes the GPTQ/AWQ fixtures (make_gptq_awq_fixtures.py) into WORK_DIR, then
WORK_DIR/dense: the same model with every quantized linear replaced by its
dequantization (reference.safetensors' "<p>.weight", f32: the values
transformers, AutoGPTQ and AutoAWQ define) and no quantization_config.
transformers runs it (f32, eager attention, one thread) on fixed token ids;
the logits go to WORK_DIR/logits.f32 and the ids to WORK_DIR/ids.i64
(2 x 9); WORK_DIR/dense_actorder, the same with gptq_actorder's act-order
linear, gives WORK_DIR/logits_actorder.f32. Then TEST_BINARY (test_gptq_model) loads gptq/, gptq_v2/ and awq/
with oslo (weights kept in q4_g128) and compares its logits with these,
then saves the GPTQ model to WORK_DIR/gptq_saved and loads it back.
"""
import json
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    import torch
    import transformers
    from safetensors.numpy import load_file, save_file
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gptq_awq_fixtures  # noqa: E402


def main(work, binary):
    make_gptq_awq_fixtures.main(work)
    src = os.path.join(work, "gptq")
    dense = os.path.join(work, "dense")
    os.makedirs(dense, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    del cfg["quantization_config"]
    with open(os.path.join(dense, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for extra in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, extra), dense)
    ck = load_file(os.path.join(src, "model.safetensors"))
    ref = load_file(os.path.join(work, "reference.safetensors"))
    tensors = {}
    for k, v in ck.items():
        if k.endswith((".qweight", ".qzeros", ".scales", ".g_idx")):
            continue
        tensors[k] = v.astype(np.float32)
    for k, v in ref.items():
        if k.endswith(".weight") and not k.startswith("act."):
            tensors[k] = v
    save_file(tensors, os.path.join(dense, "model.safetensors"))
    # dense_actorder: the same with gptq_actorder's act-order linear
    # ("act.<p>.weight", its dequantization in input order).
    dense_act = os.path.join(work, "dense_actorder")
    shutil.rmtree(dense_act, ignore_errors=True)
    shutil.copytree(dense, dense_act)
    acts = {k[len("act."):]: v for k, v in ref.items() if k.startswith("act.")}
    assert acts, "no act-order linear in the reference"
    save_file(dict(tensors, **acts), os.path.join(dense_act, "model.safetensors"))

    torch.manual_seed(0)
    torch.set_num_threads(1)
    ids = np.array([[1, 17, 42, 99, 200, 300, 7, 55, 3],
                    [1, 400, 12, 8, 77, 310, 2, 19, 250]], dtype=np.int64)
    for folder, out in ((dense, "logits.f32"), (dense_act, "logits_actorder.f32")):
        model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        with torch.no_grad():
            logits = model(torch.from_numpy(ids)).logits.float().numpy()
        logits.astype("<f4").tofile(os.path.join(work, out))
    ids.astype("<i8").tofile(os.path.join(work, "ids.i64"))
    print(f"transformers {transformers.__version__}: logits {logits.shape}")
    shutil.rmtree(os.path.join(work, "gptq_saved"), ignore_errors=True)  # the binary saves there
    return subprocess.call([binary, work])


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
