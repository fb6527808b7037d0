"""Makes the GGUF fixtures of tests/gguf/fixtures with llama.cpp's own tools
and records llama.cpp's outputs for them (llama_cpp_refs.json), which the
ctest tests gguf_model_* compare oslo against. Run it with the venv that
bench/model/llama_cpp_venv.sh makes (llama-cpp-python 0.3.36 and llama.cpp's
converter):

    build/venv-llamacpp/bin/python tests/gguf/make_llama_cpp_refs.py \
        build/venv-llamacpp/llama.cpp-convert tests/gguf/fixtures

    ... make_llama_cpp_refs.py --check CONVERTER_DIR FIXTURES OUT.json

The files (all deterministic: fixed seeds, one thread):
  - llama-tiny-gqa-f32.gguf: tests/models/fixtures/llama-tiny-gqa (2 layers,
    hidden 64, GQA 4/2 heads) converted by convert_hf_to_gguf.py --outtype f32;
  - qwen2-tiny-f16.gguf: tests/models/fixtures/qwen2-tiny (q/k/v biases, a
    byte-level BPE tokenizer: tokenizer.ggml.model "gpt2") converted with
    --outtype f16; its pre-tokenizer is GPT-2's, which the converter does not
    recognise by hash, so it is told "gpt-2" as bench/model/make_gguf.py does;
  - (llama.cpp runs with an f32 KV cache, type_k = type_v = 0, so that the
    only difference left is its quantized activations);
  - llama-256-{q8_0,q4_0,q4_k,q6_k}.gguf: a seeded LLaMA (1 layer, hidden 256,
    intermediate 256, 4 heads of 64, 2 KV heads, a head that maps token t's
    embedding to token perm[t] so that greedy decoding has clear margins,
    the llama-tiny tokenizer) written as an HF folder in a temporary directory,
    converted to f32 GGUF by the converter and quantized by llama.cpp's
    quantizer (llama_model_quantize, ftypes MOSTLY_Q8_0, MOSTLY_Q4_0,
    MOSTLY_Q4_K_M, MOSTLY_Q6_K; llama.cpp picks the types of some tensors
    itself, e.g. Q6_K for token_embd in Q4_K_M). Every quantized row is 256
    elements, whole K-quant super-blocks.
  - llama-wide-q4_k.gguf: the same seeded LLaMA made wider inside (8 heads
    of 64, 2 KV heads, intermediate 512; hidden still 256), MOSTLY_Q4_K_M:
    the row-parallel projections (o_proj, down_proj) have rows of 512, so at
    TP=2 each rank's half is whole super-blocks and the K-quant file runs
    quantized under tensor parallelism.

For every file the JSON holds llama.cpp's logits of the last position for
each prompt (token ids, so that tokenization does not enter), its 16 greedy
tokens after each prompt with the gap between its two best logits at each
step, for the tokenizer llama.cpp's tokenize() (add_bos=True,
special=False) of STRINGS, and for a file with tokenizer.chat_template (the
llama-256 files: CHAT_TEMPLATE in their tokenizer_config.json) the template
rendered by Jinja2 for CHAT_MESSAGES.

--check re-runs llama.cpp on the fixtures and writes the same JSON to OUT
(the live test gguf_model_live compares it with oslo).
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LLAMA_FIXTURE = os.path.join(ROOT, "tests", "models", "fixtures", "llama-tiny-gqa")
QWEN2_FIXTURE = os.path.join(ROOT, "tests", "models", "fixtures", "qwen2-tiny")

PROMPTS = [[1, 45, 300, 17, 99], [1, 5, 6, 7, 8, 9, 10, 11, 12], [1, 400]]
STEPS = 16
STRINGS = [
    "Hello world",
    "hello",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "multiple   inner    spaces",
    "tab\there",
    "new\nline",
    "\n\nnewlines first",
    "The quick brown fox jumps over the lazy dog.",
    "Ünïcödé, accents and emoji 🚀 are handled",
    "日本語のテキスト",
    "numbers 12345 and 3.14159",
    "punctuation!?;:,.-",
    "a",
    " ",
    "   ",
    "mixed CASE Words",
    "emoji only 🙂🙃",
    "under_score and dash-word",
]

CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}"
                 "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}")
CHAT_MESSAGES = [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Hello, w\u00f6rld!"}]

FTYPES = {"q8_0": 7, "q4_0": 2, "q4_k": 15, "q6_k": 18}


def write_llama_256(folder, I=256, NH=4):
    """A seeded LLaMA HF folder whose rows are whole K-quant super-blocks
    (intermediate I, NH heads of 64)."""
    from safetensors.numpy import save_file
    rng = np.random.default_rng(35)
    H, KV, D, V = 256, 2, 64, 515
    t = {}
    t["model.embed_tokens.weight"] = rng.normal(0, 1.0, (V, H)).astype(np.float32)
    p = "model.layers.0."
    for name, shape in [("self_attn.q_proj", (NH * D, H)), ("self_attn.k_proj", (KV * D, H)),
                        ("self_attn.v_proj", (KV * D, H)), ("self_attn.o_proj", (H, NH * D)),
                        ("mlp.gate_proj", (I, H)), ("mlp.up_proj", (I, H)),
                        ("mlp.down_proj", (H, I))]:
        t[p + name + ".weight"] = rng.normal(0, 1.0 / np.sqrt(shape[1]), shape).astype(np.float32)
    for name in ["input_layernorm", "post_attention_layernorm"]:
        t[p + name + ".weight"] = (1.0 + rng.normal(0, 0.1, (H,))).astype(np.float32)
    t["model.norm.weight"] = (1.0 + rng.normal(0, 0.1, (H,))).astype(np.float32)
    # The head reads the embedding of token t as the logit of token perm[t]:
    # the greedy next token is mostly decided by the residual's embedding
    # part, with margins well above llama.cpp's activation rounding, while
    # attention and MLP still move every logit.
    perm = rng.permutation(V)
    head = np.empty_like(t["model.embed_tokens.weight"])
    head[perm] = t["model.embed_tokens.weight"]
    t["lm_head.weight"] = (0.25 * head).astype(np.float32)
    save_file(t, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(LLAMA_FIXTURE, "config.json")))
    cfg.update(hidden_size=H, intermediate_size=I, num_attention_heads=NH, num_key_value_heads=KV,
               head_dim=D, num_hidden_layers=1, vocab_size=V, tie_word_embeddings=False,
               rope_theta=10000.0)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for n in ("tokenizer.model", "tokenizer.json", "generation_config.json"):
        shutil.copyfile(os.path.join(LLAMA_FIXTURE, n), os.path.join(folder, n))
    tc = json.load(open(os.path.join(LLAMA_FIXTURE, "tokenizer_config.json")))
    tc["chat_template"] = CHAT_TEMPLATE  # the converter writes tokenizer.chat_template
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2)


def convert(conv_dir, model, out, outtype):
    sys.path.insert(0, conv_dir)
    import convert_hf_to_gguf
    from conversion.base import TextModel
    if not hasattr(TextModel, "_oslo_pre"):
        TextModel._oslo_pre = TextModel.get_vocab_base_pre

        def vocab_base_pre(self, tokenizer):
            if os.path.realpath(self.dir_model) == os.path.realpath(QWEN2_FIXTURE):
                return "gpt-2"
            return TextModel._oslo_pre(self, tokenizer)

        TextModel.get_vocab_base_pre = vocab_base_pre
    argv = sys.argv
    sys.argv = [convert_hf_to_gguf.__file__, model, "--outfile", out, "--outtype", outtype]
    try:
        convert_hf_to_gguf.main()
    finally:
        sys.argv = argv


def quantize(src, dst, ftype):
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    if rc != 0:
        sys.exit(f"llama_model_quantize({src}, {ftype}) failed: {rc}")


def run_llama_cpp(path):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=128, n_threads=1, n_threads_batch=1,
                          logits_all=True, verbose=False, seed=0, type_k=0, type_v=0)
    out = {"logits": [], "greedy": [], "greedy_gaps": [], "tokenize": []}
    for ids in PROMPTS:
        llm.reset()
        llm.eval(ids)
        out["logits"].append([float(x) for x in np.asarray(llm.scores[llm.n_tokens - 1])])
        gen, gaps = [], []
        for _ in range(STEPS):
            row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            nxt = int(np.argmax(row))
            top2 = np.sort(row)[-2:]
            gen.append(nxt)
            gaps.append(float(top2[1] - top2[0]))
            llm.eval([nxt])
        out["greedy"].append(gen)
        out["greedy_gaps"].append(gaps)
    for s in STRINGS:
        out["tokenize"].append(llm.tokenize(s.encode("utf-8"), add_bos=True, special=False))
    template = llm.metadata.get("tokenizer.chat_template")
    if template:
        # The file's template rendered by Jinja2 as transformers sets it up.
        import jinja2
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        tok = lambda k: llm._model.token_get_text(int(llm.metadata[k]))
        out["chat"] = {"messages": CHAT_MESSAGES, "rendered": env.from_string(template).render(
            messages=CHAT_MESSAGES, add_generation_prompt=True,
            bos_token=tok("tokenizer.ggml.bos_token_id"),
            eos_token=tok("tokenizer.ggml.eos_token_id"))}
    return out


def refs(fixtures):
    files = sorted(f for f in os.listdir(fixtures) if f.endswith(".gguf"))
    res = {"prompts": PROMPTS, "steps": STEPS, "strings": STRINGS, "files": {}}
    import llama_cpp
    res["llama_cpp_python"] = llama_cpp.__version__
    for f in files:
        res["files"][f] = run_llama_cpp(os.path.join(fixtures, f))
    return res


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--check":
        with open(sys.argv[4], "w") as f:
            json.dump(refs(sys.argv[3]), f)
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    conv_dir, fixtures = sys.argv[1:]
    os.makedirs(fixtures, exist_ok=True)
    convert(conv_dir, LLAMA_FIXTURE, os.path.join(fixtures, "llama-tiny-gqa-f32.gguf"), "f32")
    convert(conv_dir, QWEN2_FIXTURE, os.path.join(fixtures, "qwen2-tiny-f16.gguf"), "f16")
    with tempfile.TemporaryDirectory() as tmp:
        hf = os.path.join(tmp, "llama-256")
        os.makedirs(hf)
        write_llama_256(hf)
        f32 = os.path.join(tmp, "llama-256-f32.gguf")
        convert(conv_dir, hf, f32, "f32")
        for name, ftype in FTYPES.items():
            quantize(f32, os.path.join(fixtures, f"llama-256-{name}.gguf"), ftype)
        wide = os.path.join(tmp, "llama-wide")
        os.makedirs(wide)
        write_llama_256(wide, I=512, NH=8)
        f32 = os.path.join(tmp, "llama-wide-f32.gguf")
        convert(conv_dir, wide, f32, "f32")
        quantize(f32, os.path.join(fixtures, "llama-wide-q4_k.gguf"), FTYPES["q4_k"])
    with open(os.path.join(fixtures, "llama_cpp_refs.json"), "w") as f:
        json.dump(refs(fixtures), f)


if __name__ == "__main__":
    main()
