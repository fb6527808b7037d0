#!/usr/bin/env bash
# Creates (once) the virtual environment of benchmark 7's llama.cpp reference
# (bench/model/run.sh) and prints the path of its interpreter:
#
#   bash bench/model/llama_cpp_venv.sh BUILD_DIR  -> BUILD_DIR/venv-llamacpp/bin/python
#
# What it holds, all pinned (bump a pin below and the venv is made again):
#   - llama-cpp-python, built FROM SOURCE (pip --no-binary) for this machine's
#     processor: CMAKE_ARGS -DGGML_NATIVE=ON (-march=native), no BLAS, no
#     CUDA, no multimodal library (LLAVA_BUILD=OFF); ggml's own CPU kernels
#     with its default OpenMP threading. CMAKE_BUILD_PARALLEL_LEVEL=2.
#   - llama.cpp's Hugging Face -> GGUF converter (convert_hf_to_gguf.py and
#     its conversion/ package), taken from the same llama-cpp-python sdist
#     (it vendors llama.cpp under vendor/llama.cpp), so the converter and the
#     engine are the same llama.cpp. It lands in BUILD_DIR/venv-llamacpp/
#     llama.cpp-convert/; nothing of it is in the repository.
#   - the gguf package the converter is written against: the sdist's
#     vendor/llama.cpp/gguf-py (version 0.19.0, as on PyPI, but the vendored
#     tree is what that converter was tested with), installed from there.
#   - what the converter needs, at the versions its own
#     requirements/requirements-convert_hf_to_gguf.txt names: torch (PyPI's
#     build, see below), numpy, transformers, sentencepiece, protobuf; and safetensors.
# Only PyPI is used (no GitHub, no model hub).
# Measured on 2026-11-26 (AMD EPYC, 2 cores shared with another compile): see
# docs/BENCHMARKS.md section 7 for the build time. When the venv is current only
# the import check runs.
set -euo pipefail
build=${1:?usage: llama_cpp_venv.sh BUILD_DIR}
venv="$build/venv-llamacpp"
llama_cpp_python=0.3.36
reqs=(torch==2.11.0 numpy==2.2.6 transformers==4.57.6
      "sentencepiece>=0.1.98,<0.3.0" "protobuf>=4.21.0,<5.0.0" safetensors)
cmake_args="-DGGML_NATIVE=ON -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DLLAVA_BUILD=OFF"
stamp="$venv/.oslo-requirements"
want="llama-cpp-python==$llama_cpp_python ${reqs[*]} CMAKE_ARGS=$cmake_args"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  mkdir -p "$build"
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  pip=("$venv/bin/python" -m pip --disable-pip-version-check)
  # The sdist: built from it below, and the converter and gguf-py are taken
  # out of it.
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "${pip[@]}" download --quiet --no-deps --no-binary :all: \
    "llama-cpp-python==$llama_cpp_python" -d "$tmp" >&2
  sdist="$tmp/llama_cpp_python-$llama_cpp_python.tar.gz"
  vendor="llama_cpp_python-$llama_cpp_python/vendor/llama.cpp"
  tar -xzf "$sdist" -C "$tmp" "$vendor/convert_hf_to_gguf.py" "$vendor/conversion" "$vendor/gguf-py"
  # torch is PyPI's (the CUDA build, with its CUDA libraries as wheels,
  # about 3 GB: importing it needs them even without a GPU). The PyTorch CPU
  # wheel index is not reachable from the project's machines; the converter
  # imports torch at its top, so it is needed (only to make the GGUF).
  "${pip[@]}" install --quiet "${reqs[@]}" "$tmp/$vendor/gguf-py" >&2
  start=$(date +%s)
  CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=2 \
    "${pip[@]}" install --quiet --no-binary llama-cpp-python "$sdist" >&2
  echo "llama-cpp-python $llama_cpp_python built in $(( $(date +%s) - start )) s" >&2
  rm -rf "$venv/llama.cpp-convert"
  mkdir "$venv/llama.cpp-convert"
  mv "$tmp/$vendor/convert_hf_to_gguf.py" "$tmp/$vendor/conversion" "$venv/llama.cpp-convert/"
  echo "$want" >"$stamp"
fi
"$venv/bin/python" -c "import llama_cpp, gguf, torch, transformers, safetensors" >&2
test -f "$venv/llama.cpp-convert/convert_hf_to_gguf.py"
echo "$(cd "$venv/bin" && pwd)/python"
