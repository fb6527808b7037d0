#!/bin/sh
# Makes the GPT-2 GGUF fixtures, tests/gguf/fixtures/gpt2-tiny-{f32,q8_0}.gguf,
# from tests/models/fixtures/gpt2-tiny (2 layers, hidden 64, 4 heads,
# n_inner 128, vocabulary 515, tied head) with llama.cpp's converter,
# --outtype f32 and q8_0, through bench/model/make_gguf.py (which gives the
# converter "n_ctx" and n_inner, see there). Run from the repository root
# with the venv that bench/model/llama_cpp_venv.sh makes:
#
#   sh tests/gguf/make_gpt2_fixtures.sh build/venv-llamacpp/bin/python \
#       build/venv-llamacpp/llama.cpp-convert tests/gguf/fixtures
set -eu
py=$1 conv=$2 out=$3
for t in f32 q8_0; do
  rm -f "$out/gpt2-tiny-$t.gguf"
  "$py" bench/model/make_gguf.py "$conv" tests/models/fixtures/gpt2-tiny "$out/gpt2-tiny-$t.gguf" "$t"
done
