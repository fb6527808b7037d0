"""Makes the GGUF file of a Hugging Face model folder with llama.cpp's own
converter, for benchmark 7's llama.cpp reference (bench/model/run.sh):

    python make_gguf.py CONVERTER_DIR MODEL_DIR OUT.gguf f32|bf16|q8_0

CONVERTER_DIR holds convert_hf_to_gguf.py and its conversion/ package, taken
from the pinned llama-cpp-python sdist by bench/model/llama_cpp_venv.sh; run
this with that venv's python. The tensors are written in the given type
(--outtype), so the f32 folder gives an f32 GGUF and the bf16 one a bf16 GGUF;
q8_0 (the quantized decode benchmark, run_quant.sh) gives the converter's
own Q8_0 file from the f32 folder: its 2-D weights in Q8_0, norms and biases
in f32.
Nothing is done when OUT.gguf is newer than the folder's weights, config
and tokenizer.

One thing is set from outside the converter: it names a BPE tokenizer's
pre-tokenizer by hashing the ids the tokenizer gives for a fixed text, and it
knows only the hashes of published models. The tokenizer that
make_gpt2_small.py writes (GPT-2's byte-level pre-tokenizer over a
vocabulary of its own) is not among them, so the converter would stop with
"BPE pre-tokenizer was not recognized". For a folder whose tokenizer.json
has exactly GPT-2's pre-tokenizer (ByteLevel, GPT-2's split pattern, no
prefix space; checked below) it is told "gpt-2", the name llama.cpp gives
that pre-tokenizer; any other folder goes through the converter's own check.

Two more, for GPT-2 folders as transformers writes them now (the
converter's GPT2Model was written for OpenAI's original config.json): it
reads the context length from "n_ctx", which newer configs leave out (then
n_positions is used, the same number), and it writes feed_forward_length as
4 x n_embd whatever "n_inner" says, which would give a file whose metadata
disagrees with its ffn tensors when n_inner is set (llama.cpp then refuses
it; tests/models/fixtures/gpt2-tiny has n_inner = 2 x n_embd): n_inner is
written when set.
"""
import json
import os
import sys


def gpt2_pre_tokenizer(folder):
    try:
        with open(os.path.join(folder, "tokenizer.json")) as f:
            pre = json.load(f).get("pre_tokenizer") or {}
    except OSError:
        return False
    return (pre.get("type") == "ByteLevel" and pre.get("use_regex", True)
            and not pre.get("add_prefix_space", False))


def main():
    if len(sys.argv) != 5 or sys.argv[4] not in ("f32", "bf16", "q8_0"):
        sys.exit(__doc__)
    conv_dir, model, out, dtype = sys.argv[1:]
    inputs = [os.path.join(model, f) for f in ("model.safetensors", "config.json", "tokenizer.json")]
    if os.path.exists(out) and os.path.getmtime(out) > max(map(os.path.getmtime, inputs)):
        return
    sys.path.insert(0, conv_dir)
    import convert_hf_to_gguf
    from conversion.base import TextModel

    checked = TextModel.get_vocab_base_pre

    def vocab_base_pre(self, tokenizer):
        if gpt2_pre_tokenizer(self.dir_model):
            return "gpt-2"
        return checked(self, tokenizer)

    TextModel.get_vocab_base_pre = vocab_base_pre

    from conversion.gpt2 import GPT2Model

    gpt2_params = GPT2Model.set_gguf_parameters

    def set_gpt2_params(self):
        hp = self.hparams
        hp.setdefault("n_ctx", hp.get("n_positions"))
        w = self.gguf_writer
        add_ff = w.add_feed_forward_length
        if hp.get("n_inner"):
            w.add_feed_forward_length = lambda n: add_ff(hp["n_inner"])
        try:
            gpt2_params(self)
        finally:
            w.add_feed_forward_length = add_ff

    GPT2Model.set_gguf_parameters = set_gpt2_params
    tmp = out + ".tmp"
    sys.argv = [convert_hf_to_gguf.__file__, model, "--outfile", tmp, "--outtype", dtype]
    convert_hf_to_gguf.main()
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
