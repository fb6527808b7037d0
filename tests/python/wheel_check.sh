#!/bin/sh
# The Python wheel from the source tree (pyproject.toml at the root,
# scikit-build-core): `pip wheel .` builds liboslo, the SentencePiece shim,
# oslo, oslo-run and the extension into one wheel; it is installed into a
# fresh venv and used from outside the build tree:
#   - import oslo loads the wheel's extension and liboslo (RUNPATH $ORIGIN)
#   - python -m oslo generate prints what the build tree's oslo prints
#   - python -m oslo --help exits 0
#   - oslo-run --nproc-per-node 2 python -c ...: an all-reduce over two ranks
# Usage: wheel_check.sh PYTHON SOURCE_DIR OSLO_CLI MODEL_DIR WORK_DIR [WHEEL]
# WHEEL: check this wheel (e.g. auditwheel repair's) instead of building one.
# OSLO_WHEEL_PLUGINS="cuda torch" (either or both): build the wheel with those
# backend plugins on (-C cmake.define.OSLO_BUILD_CUDA=ON /
# OSLO_BACKEND_TORCH=ON) and check that it holds oslo/liboslo_backend_<name>.so
# and that a context with "backend": "<name>" loads that file from the venv
# (it starts, or fails to start for want of a GPU: not "not available").
# PYTHON builds the wheel (no build isolation: the build backend comes from
# the tests' venv, offline) and must have scikit-build-core (tools/test-venv.sh
# installs it); exit 77 (skip) otherwise. The CMake build folder under
# WORK_DIR is kept, so a second run rebuilds only what changed; ccache is
# used when it is on PATH. The first run compiles the library again (86 s on
# 2 idle cores; a rerun about 10 s).
set -eu
py=$1 src=$2 cli=$3 model=$4 work=$5 whl=${6:-}
if ! "$py" -c "import scikit_build_core" 2>/dev/null; then
  echo "SKIP: scikit-build-core is not installed for $py"
  exit 77
fi
mkdir -p "$work"
rm -rf "$work/dist" "$work/venv" "$work/run"
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER="${CMAKE_C_COMPILER_LAUNCHER:-ccache}"
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
fi
start=$(date +%s)
plugins=${OSLO_WHEEL_PLUGINS:-}
defines=""
for p in $plugins; do
  case "$p" in
    cuda) defines="$defines --config-settings=cmake.define.OSLO_BUILD_CUDA=ON" ;;
    torch) defines="$defines --config-settings=cmake.define.OSLO_BACKEND_TORCH=ON" ;;
    *) echo "OSLO_WHEEL_PLUGINS: unknown plugin $p (cuda, torch)"; exit 2 ;;
  esac
done
if [ -z "$whl" ]; then
  # shellcheck disable=SC2086
  "$py" -m pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps \
    -w "$work/dist" --config-settings=build-dir="$work/cmake-build" $defines "$src"
  echo "pip wheel: $(($(date +%s) - start)) s"
  whl=$(ls "$work"/dist/oslo-*.whl)
fi
echo "wheel: $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB)"
# What the wheel must hold (cmake/OsloWheel.cmake).
"$py" - "$whl" $plugins <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
want = ["oslo/__init__.py", "oslo/__main__.py", "oslo/capi.py", "oslo/liboslo.so.0",
        "oslo/_enums.py", "oslo/_tensor.py", "oslo/_layers.py", "oslo/_inputs.py",
        "oslo/_model.py", "oslo/_train.py", "oslo/_tokenizer.py", "oslo/serve.py",
        "oslo/liboslo_sentencepiece.so", "oslo/oslo", "oslo/oslo-run"]
want += [f"oslo/liboslo_backend_{p}.so" for p in sys.argv[2:]]
missing = [w for w in want if w not in names]
missing += [] if any(n.startswith("oslo/_capi.") and n.endswith(".so") for n in names) \
    else ["oslo/_capi.*.so"]
assert not missing, f"the wheel lacks {missing}: {names}"
print("wheel holds", len(names), "files:", " ".join(sorted(n for n in names if n.startswith("oslo/"))))
PY

# A fresh venv, without the tests' packages. numpy (the package's only
# dependency) from the package index, or, offline, the tests' venv's own.
"$py" -m venv "$work/venv"
vpy="$work/venv/bin/python"
if ! "$vpy" -m pip install --quiet --disable-pip-version-check --timeout 20 "$whl" 2>"$work/pip.err"; then
  echo "numpy from the index failed ($(tail -1 "$work/pip.err")): linking the tests' venv's numpy"
  "$vpy" -m pip install --quiet --disable-pip-version-check --no-deps "$whl"
  mkdir -p "$work/venv/numpy-link"
  np=$("$py" -c "import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))")
  for d in "$np"/numpy "$np"/numpy.libs; do
    if [ -e "$d" ]; then ln -s "$d" "$work/venv/numpy-link/"; fi
  done
  site=$("$vpy" -c "import sysconfig; print(sysconfig.get_path('purelib'))")
  echo "$work/venv/numpy-link" >"$site/numpy-link.pth"
fi

# Outside the source and build trees, with nothing of them on the paths.
mkdir -p "$work/run"
cd "$work/run"
unset PYTHONPATH LD_LIBRARY_PATH
"$vpy" - "$work/venv" "$src/tests/tokenizer/fixtures/llama2_spm" <<'PY'
import os, sys
import numpy as np
import oslo
import oslo._capi as ext
venv = os.path.realpath(sys.argv[1])
for m in (oslo, ext):
    assert os.path.realpath(m.__file__).startswith(venv), m.__file__
with oslo.Context() as ctx:
    x = ctx.all_reduce(np.arange(3, dtype=np.float32))
    assert list(x) == [0, 1, 2], x
# A SentencePiece .model: liboslo dlopens the shim from its own folder.
ids = oslo.Tokenizer(os.path.join(sys.argv[2], "tokenizer.model")).encode("Hello world")
assert len(ids) >= 2, ids
# liboslo and the shim as the loader found them: the wheel's copies.
libs = {l.split()[-1] for l in open("/proc/self/maps") if "liboslo" in l}
assert len(libs) == 2 and all(os.path.realpath(l).startswith(venv) for l in libs), libs
print("SentencePiece ids", ids, "through", " ".join(sorted(os.path.basename(l) for l in libs)))
print("import oslo", oslo.version(), "from", os.path.dirname(oslo.__file__))
PY

# The plugins the wheel carries: liboslo finds them in its own folder.
for p in $plugins; do
  "$vpy" - "$work/venv" "$p" <<'PY'
import os, sys
import numpy as np
import oslo
venv, name = os.path.realpath(sys.argv[1]), sys.argv[2]
try:
    with oslo.Context({"backend": name}) as ctx:
        x = ctx.all_reduce(np.arange(3, dtype=np.float32))
        assert list(x) == [0, 1, 2], x
        how = "started, one-rank all-reduce ok"
except oslo.Error as e:
    # Without a GPU the CUDA plugin loads and then finds no device.
    msg = str(e)
    assert "failed to start" in msg and "is not available" not in msg, msg
    how = "loaded, then: " + msg.split("failed to start: ")[-1][:120]
libs = {l.split()[-1] for l in open("/proc/self/maps") if f"liboslo_backend_{name}.so" in l}
assert len(libs) == 1 and os.path.realpath(libs.pop()).startswith(venv), libs
print(f"plugin {name} from the wheel: {how}")
PY
done

# The same generate through the wheel (python -m oslo) and the build tree.
# (A text prompt: the model folder's tokenizer.json both ways.)
set -- generate --model "$model" --max-new-tokens 8 --prompt "The quick brown fox"
"$cli" "$@" >build_tree.out
"$vpy" -m oslo "$@" >wheel.out
if ! cmp -s build_tree.out wheel.out || [ ! -s wheel.out ]; then
  echo "FAIL: python -m oslo $* differs from the build tree's oslo:"
  diff -u build_tree.out wheel.out || true
  exit 1
fi
echo "python -m oslo generate = build tree's oslo generate: $(cat wheel.out)"
"$vpy" -m oslo --help >help.out
grep -q generate help.out || { echo "FAIL: python -m oslo --help printed:"; cat help.out; exit 1; }
echo "python -m oslo --help: exit 0, $(wc -l <help.out) lines"

# Two ranks under the wheel's oslo-run (console script).
"$work/venv/bin/oslo-run" --nproc-per-node 2 "$vpy" -c '
import numpy as np, oslo
with oslo.Context() as ctx:
    r, n = ctx.rank(), ctx.size()
    assert n == 2, n
    s = ctx.all_reduce(np.full(4, r + 1, dtype=np.float32))
    assert list(s) == [3.0] * 4, s
    print(f"rank {r}/{n}: all_reduce {s.tolist()}", flush=True)
' >ranks.out
cat ranks.out
# Both ranks' lines (they may share a line: two processes, one pipe).
[ "$(grep -o 'all_reduce \[3.0, 3.0, 3.0, 3.0\]' ranks.out | wc -l)" = 2 ] || {
  echo "FAIL: oslo-run --nproc-per-node 2: not two ranks' sums"; exit 1; }
echo "PASS: the wheel works in a fresh venv ($(($(date +%s) - start)) s in all)"
