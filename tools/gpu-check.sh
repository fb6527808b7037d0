#!/usr/bin/env bash
# The GPU check of the native CUDA backend, in two halves:
#
#   bash tools/gpu-check.sh pack [DEST]   (here, on the build machine)
#     builds what the check needs in build/ (the CUDA plugin, liboslo, the
#     test programs, the benchmarks), strips it, adds the Debian libraries
#     they need that a GPU machine lacks (ldd), the test scripts and model
#     fixtures, and writes DEST/oslo-gpu.tar.xz plus a copy of this script
#     (DEST defaults to .gpu in the main checkout, the folder the device
#     tool carries).
#   bash .gpu/gpu-check.sh run            (on the GPU machine)
#     unpacks the archive at the same absolute paths, runs every ctest entry
#     labelled cuda (plugin tests, the conformance suite on "cuda" at world
#     size 1, checkpoints cpu <-> cuda, the Hugging Face model oracles at
#     TP=1), then, each part under its own time limit:
#       nccl1   NCCL communicators of one rank ("communicator": "backend" at
#               world 1): rank_test collectives as a thread and as a
#               process, and backend_curve_test training through them;
#       ranks   several ranks sharing the GPU through the staged host
#               communicator ("communicator": "host"): the guard_ranks suite
#               (tests/guard_ranks: models, generate, checkpoints, training
#               at TP/DP/PP 2 and 4) with OSLO_TEST_BACKEND=cuda instead of
#               the guard, and the conformance layers and collectives at
#               world 2 and 4 (processes and threads);
#       train   backend_curve_test (20 AdamW steps against the CPU backend)
#               for every causal family at world 1 (f32 with and without
#               activation checkpointing, bf16 and f16 with it), and `oslo
#               train --device cuda` against --device cpu
#               (tests/cli/test_cli_train_device.sh: world 1, 2 processes
#               sharing the GPU);
#     then the GPU benchmarks (bench_cuda_linear; decode and prefill
#     of a GPT-2-small-shaped and a LLaMA-shaped 1.1B model against
#     transformers on the same GPU) with the time left, and prints one
#     summary. The whole run stays within OSLO_GPU_BUDGET seconds (default
#     540): every part's limit is cut to what is left, and a part with under
#     20 s left is skipped (said in the summary). Logs go to $OUT
#     when set. OSLO_GPU_BENCH=0 skips the benchmarks, OSLO_GPU_HF=0 the
#     transformers references, OSLO_GPU_TORCH=0 the torch plugin build,
#     OSLO_GPU_NCCL1=0, OSLO_GPU_RANKS=0 and OSLO_GPU_TRAIN=0 the parts above,
#     OSLO_GPU_LEAN=1 the comparison runs and profiles (a short check);
#     OSLO_GPU_COMPILE=1 adds transformers' static cache + torch.compile.
set -uo pipefail
mode=${1:-}
here=$(cd "$(dirname "$0")" && pwd)

if [ "$mode" = pack ]; then
  root=$(cd "$here/.." && pwd)
  build=${OSLO_GPU_BUILD:-$root/build}
  dest=${2:-/work/main/.gpu}
  targets="oslo oslo_cli oslo_backend_cuda test_cuda_plugin conf_ops rank_test oslo-run model_ref_test
           model_capi_test model_train_test data_parallel_test pipeline_train_test
           train_checkpoint_test backend_curve_test bench_model bench_cuda_linear"
  ninja -C "$build" -j2 $targets >/dev/null || { echo "build failed"; exit 1; }
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage$build/gpu-libs" "$dest"
  bins=""
  for t in liboslo_backend_cuda.so test_cuda_plugin conf_ops rank_test oslo-run model_ref_test \
           model_capi_test model_train_test data_parallel_test pipeline_train_test \
           train_checkpoint_test backend_curve_test bench_model bench_cuda_linear; do
    # (Not the copies a pip-install test leaves under tests/python.)
    f=$(find "$build" -name "$t" -type f -not -path '*/CMakeFiles/*' -not -path '*/tests/python/*' |
        head -1)
    [ -n "$f" ] || { echo "missing $t"; exit 1; }
    bins="$bins $f"
  done
  bins="$bins $build/tools/oslo/oslo"
  for f in $bins "$build"/liboslo.so*; do
    mkdir -p "$stage$(dirname "$f")"
    cp -P "$f" "$stage$f"
    [ -L "$f" ] || strip --strip-debug "$stage$f"
  done
  # The ctest files (every folder's: ctest reads them all).
  (cd "$build" && find . -name CTestTestfile.cmake) | while read -r c; do
    mkdir -p "$stage$build/$(dirname "$c")"
    cp "$build/$c" "$stage$build/$c"
  done
  # Libraries a GPU machine (Ubuntu 24.04 with CUDA, no oslo dependencies)
  # lacks: everything ldd resolves outside glibc, libstdc++/libgcc (theirs
  # is newer), CUDA's own libraries and the build tree.
  for f in $bins "$build"/liboslo.so; do
    ldd "$f" | awk '/=> \// {print $3}'
  done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*) ;;
      libcuda.so*|libcublas*|libnccl*|libcudart*) ;;
      *) case "$lib" in "$build"/*) ;; *) cp -L "$lib" "$stage$build/gpu-libs/" ;; esac ;;
    esac
  done
  # The scripts the ctest entries and the parts below run (tests/models'
  # checkpoint flows, tests/cli's train check), the fixtures, README.md (the
  # train check's corpus).
  for d in tests/cuda tests/torch_plugin tests/layers tests/models tests/cli bench/cuda \
           bench/model backends/torch include core/backend; do
    mkdir -p "$stage$root/$d"
    cp -r "$root/$d/." "$stage$root/$d/"
  done
  cp "$root/README.md" "$stage$root/"
  # nlohmann/json's header, for building the torch plugin there.
  mkdir -p "$stage$root/.gpu-include"
  cp -r /usr/include/nlohmann "$stage$root/.gpu-include/"
  mkdir -p "$stage$root/tools"
  cp "$root/tools/gpu-check.sh" "$stage$root/tools/"
  tar -cJf "$dest/oslo-gpu.tar.xz" -C "$stage" $(ls "$stage")
  cp "$root/tools/gpu-check.sh" "$dest/gpu-check.sh"
  echo "$build" >"$dest/build-path"
  du -sh "$dest"
  exit 0
fi

if [ "$mode" != run ]; then
  echo "usage: $0 pack [DEST] | run"
  exit 2
fi

out=${OUT:-/tmp/oslo-gpu-out}
mkdir -p "$out"
t_start=$(date +%s)
build=$(cat "$here/build-path")
tar -xJf "$here/oslo-gpu.tar.xz" --no-overwrite-dir -C / || { echo "unpack failed"; exit 1; }
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$build/gpu-libs:/usr/local/cuda/lib64:${nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OSLO_BACKEND_PATH=$build
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$out/gpu.txt"
cd "$build" || exit 1
# The time budget: lim N is N seconds cut to what is left of it (5 s kept
# for the summary; 0 when under 20 s are left: the part is skipped).
budget=${OSLO_GPU_BUDGET:-540}
lim() {
  local l=$((budget - ($(date +%s) - t_start) - 5))
  if [ "$l" -lt 20 ]; then echo 0; elif [ "$l" -lt "$1" ]; then echo "$l"; else echo "$1"; fi
}
# tl N: lim N for a timeout after the parts (1 s when out of time).
tl() {
  local v
  v=$(lim "$1")
  [ "$v" = 0 ] && v=1
  echo "$v"
}
# step NAME SECONDS CMD...: CMD under timeout (lim SECONDS), its output in
# $out/NAME.log, one line in $parts: ok / FAILED / TIMEOUT / skipped, the
# seconds it took and its last line that starts with "[" or holds "passed".
parts=""
step() {
  local name=$1 t r rc s0
  t=$(lim "$2")
  shift 2
  if [ "$t" = 0 ]; then
    parts="$parts$name: skipped (out of time)"$'\n'
    return
  fi
  s0=$(date +%s)
  timeout "$t" "$@" >"$out/$name.log" 2>&1
  rc=$?
  case $rc in 0) r=ok ;; 124 | 137) r="TIMEOUT at $t s" ;; *) r="FAILED rc $rc" ;; esac
  parts="$parts$name: $r ($(($(date +%s) - s0)) s) $(grep -E '^\[|passed' "$out/$name.log" |
    tail -1 | cut -c1-300)"$'\n'
  echo "$name: $r"
}

echo "== ctest -L cuda"
timeout "$(tl 240)" ctest -L cuda -j4 --timeout 90 -V >"$out/ctest-full.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|tests failed" "$out/ctest-full.log" | sed 's/^[0-9]*: //' >"$out/ctest.log"
tail -30 "$out/ctest.log"
summary_tests=$(grep -E "tests passed|tests failed" "$out/ctest.log" | tail -1)
failed=$(grep -E "\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception" "$out/ctest.log" || true)
skipped=$(grep -E "\*\*\*Skipped|Not Run" "$out/ctest.log" || true)
# Op counts of the conformance suite on cuda.
ops=$(grep -hoE "(conformance ops on cuda|rank_test [a-z-]+ tp=1 [a-z]+ backend=cuda|checkpoint [a-z]+ -> [a-z]+|\[rank 0 tp 1\] [a-z_0-9]+( (through the KV cache|by append_argmax))?|^[a-z_0-9]+: passed).*" "$out/ctest-full.log" | sed 's/^[0-9]*: //' | sort | uniq -c || true)
grep -E "^FAIL" "$out/ctest-full.log" | head -40

root=$(dirname "$build")
rt=$(find "$build" -name rank_test -type f | head -1)
orun=$(find "$build" -name oslo-run -type f -not -path '*/CMakeFiles/*' | head -1)
bc=$(find "$build" -name backend_curve_test -type f -not -path '*/CMakeFiles/*' | head -1)
fix=$root/tests/models/fixtures

# NCCL communicators of one rank: "communicator": "backend" gives every
# group, a group of one too, the backend's own (core/context/context.cpp),
# so NCCL's streams, waits and timeouts run on device buffers at world 1.
if [ "${OSLO_GPU_NCCL1:-1}" = 1 ]; then
  echo "== NCCL at world 1"
  step nccl1_collectives_threads 40 env OSLO_TEST_COMMUNICATOR=backend "$rt" collectives --tp 1 \
    --threads 1 --backend cuda
  step nccl1_collectives_procs 40 env OSLO_TEST_COMMUNICATOR=backend "$orun" --nproc-per-node 1 \
    "$rt" collectives --tp 1 --backend cuda
  step nccl1_train_gpt2 60 "$bc" "$fix/gpt2-tiny" --backend cuda --communicator backend
fi

# Training on the GPU against the CPU backend: every causal family at world
# 1 (8 runs at a time; each line of curves.txt: fixture, dtype, result and
# the worst relative differences), then `oslo train --device cuda` against
# --device cpu at world 1 and as 2 processes sharing the GPU.
curves=""
if [ "${OSLO_GPU_TRAIN:-1}" = 1 ]; then
  echo "== training on cuda against cpu"
  t=$(lim 150)
  if [ "$t" != 0 ]; then
    for f in gpt2-tiny llama-tiny-gqa llama-tiny-mqa mistral-tiny qwen2-tiny gpt-neox-tiny \
             gemma-tiny phi3-tiny; do
      for v in f32 "f32 --checkpointing" "bf16 --checkpointing" "f16 --checkpointing"; do
        echo "$f $v"
      done
    done | timeout "$t" xargs -P 8 -L 1 sh -c '
      "$1" "$2/$3" --backend cuda --dtype "$4" $5 >"$0/curve_$3_$4${5:+_ckpt}.log" 2>&1
    ' "$out" "$bc" "$fix"
    # (xargs appends each line: $3 fixture, $4 dtype, $5 --checkpointing.)
    curves=$(for l in "$out"/curve_*.log; do
      [ -f "$l" ] || continue
      n=$(basename "$l" .log)
      if grep -q "failure(s)" "$l" || ! grep -q "steps vs cpu" "$l"; then
        echo "$n: FAILED $(grep -m1 -E "FAIL|rror" "$l" | cut -c1-200)"
      else
        echo "$n: ok $(grep "steps vs cpu" "$l" | sed "s/.*vs cpu: //" | cut -c1-200)"
      fi
    done)
    echo "$curves"
  else
    curves="skipped (out of time)"
  fi
  step cli_train_device_cuda 120 sh "$root/tests/cli/test_cli_train_device.sh" \
    "$build/tools/oslo/oslo" "$orun" "$fix/gpt2-tiny" "$root" /tmp/oslo-cli-train-cuda python3 \
    "--device cuda"
fi

# Several ranks sharing the GPU through the staged host communicator: the
# guard_ranks suite with the cuda backend in the guard's place, and the
# conformance layers and collectives at world 2 and 4.
if [ "${OSLO_GPU_RANKS:-1}" = 1 ]; then
  echo "== ranks sharing the GPU (\"communicator\": \"host\")"
  sed -i 's/OSLO_TEST_BACKEND=guard/OSLO_TEST_BACKEND=cuda/' "$build/tests/guard_ranks/CTestTestfile.cmake"
  step ranks_suite_cuda 200 ctest -L guard_ranks -j6 --timeout 150 --output-on-failure
  ranks_failed=$(grep -E "\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception" "$out/ranks_suite_cuda.log" || true)
  parts="$parts  $(grep -E "tests passed|tests failed" "$out/ranks_suite_cuda.log" | tail -1)"$'\n'
  [ -n "$ranks_failed" ] && parts="$parts$ranks_failed"$'\n'
  for spec in "layers 2 2 f32" "layers 4 4 f32" "layers 4 2 f32" "layers 2 2 bf16" \
              "collectives 2 2 f32" "collectives 4 2 f32"; do
    read -r m w tp dt <<<"$spec"
    step "conf_${m}_w${w}_tp${tp}_${dt}_procs" 60 env OSLO_TEST_COMMUNICATOR=host "$orun" \
      --nproc-per-node "$w" "$rt" "$m" --tp "$tp" --backend cuda --dtype "$dt"
    step "conf_${m}_w${w}_tp${tp}_${dt}_threads" 60 env OSLO_TEST_COMMUNICATOR=host "$rt" "$m" \
      --tp "$tp" --threads "$w" --backend cuda --dtype "$dt"
  done
fi

# The group of one on device memory (core/comm/self_communicator.hpp): rank_test
# collectives at world 1 on cuda, and on the torch plugin on CUDA (built here
# against this machine's torch when it builds within the time limit).
timeout "$(tl 30)" "$rt" collectives --tp 1 --threads 1 --backend cuda >"$out/coll_cuda.log" 2>&1
coll="cuda: rc $? $(tail -1 "$out/coll_cuda.log")"
tdir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null)
if [ -n "$tdir" ] && [ "${OSLO_GPU_TORCH:-1}" = 1 ]; then
  abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  ok=1
  for f in torch_backend torch_ops torch_comm; do
    timeout "$(tl 150)" g++ -c -O1 -fPIC -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$abi" -w \
      -I"$tdir/include" -I"$tdir/include/torch/csrc/api/include" -I"$root/include" \
      -I"$root/core/backend" -I"$root/.gpu-include" "$root/backends/torch/$f.cpp" \
      -o "/tmp/oslo_torch_$f.o" >"$out/torch_build_$f.log" 2>&1 &
  done
  wait
  for f in torch_backend torch_ops torch_comm; do [ -f "/tmp/oslo_torch_$f.o" ] || ok=0; done
  if [ $ok = 1 ] && g++ -shared -o "$build/liboslo_backend_torch.so" /tmp/oslo_torch_*.o \
      -L"$tdir/lib" -Wl,--no-as-needed -ltorch -ltorch_cpu -ltorch_cuda -lc10 -lc10_cuda \
      -Wl,-rpath,"$tdir/lib" -Wl,--version-script="$root/backends/torch/plugin.map" \
      >"$out/torch_link.log" 2>&1; then
    timeout "$(tl 30)" "$rt" collectives --tp 1 --threads 1 --backend torch \
      --backend-options '{"device": "cuda"}' >"$out/coll_torch.log" 2>&1
    coll="$coll; torch on CUDA: rc $? $(tail -1 "$out/coll_torch.log")"
  else
    coll="$coll; torch plugin did not build here (see torch_build_*.log)"
  fi
fi
echo "world-1 collectives: $coll"

bench=""
if [ "${OSLO_GPU_BENCH:-1}" = 1 ]; then
  echo "== benchmarks"
  bl=$(timeout "$(tl 120)" "$(find "$build" -name bench_cuda_linear -type f | head -1)" "$build/liboslo_backend_cuda.so" 2>&1)
  echo "$bl"
  bench="$bench$bl"$'\n'
  bm=$(find "$build" -name bench_model -type f | head -1)
  mkdir -p /tmp/oslo-bench
  timeout "$(tl 120)" python3 "$root/bench/model/make_gpt2_small.py" /tmp/oslo-bench/gpt2 >/dev/null 2>&1
  timeout "$(tl 180)" python3 "$root/bench/cuda/make_llama_1b.py" /tmp/oslo-bench/llama1b >/dev/null 2>&1
  for m in gpt2/f32 gpt2/bf16 llama1b; do
    dir=/tmp/oslo-bench/$m
    [ -f "$dir/config.json" ] || { bench="$bench$m: model not made"$'\n'; continue; }
    o=$(timeout "$(tl 100)" "$bm" "$dir" --backend cuda --reps 2 2>&1 | tail -3)
    echo "oslo $m: $o"
    bench="${bench}oslo $m: $o"$'\n'
    if [ "$m" != gpt2/f32 ] && [ "${OSLO_GPU_HF:-1}" = 1 ]; then
      flag=""
      [ "${OSLO_GPU_COMPILE:-0}" = 1 ] && [ "$m" = llama1b ] && flag=--compile
      h=$(timeout "$(tl 150)" python3 "$root/bench/cuda/hf_cuda.py" "$dir" --reps 2 $flag 2>&1 | tail -1)
      echo "hf $m: $h"
      bench="${bench}hf $m: $h"$'\n'
    fi
  done
  # The same LLaMA-shaped model with decode steps recorded as graphs, and
  # with nothing of this plugin's own fast paths (the core's compositions,
  # cuBLASLt for every product), same run.
  if [ -f /tmp/oslo-bench/llama1b/config.json ] && [ "${OSLO_GPU_LEAN:-0}" != 1 ]; then
    for v in "OSLO_CUDA_GRAPHS=1" "OSLO_FUSED_OPS=0 OSLO_CUDA_SKINNY=0"; do
      o=$(env $v timeout "$(tl 100)" "$bm" /tmp/oslo-bench/llama1b --backend cuda --reps 2 2>&1 | tail -1)
      echo "oslo llama1b $v: $o"
      bench="${bench}oslo llama1b ($v): $o"$'\n'
    done
    # Where the time goes: per-entry host time over prefill and decode, then
    # host + device per entry of 512-token prefills alone, once and five
    # times (the difference: four warm prefills, without loading and the
    # first one's plan queries).
    OSLO_CUDA_PROFILE=1 timeout "$(tl 100)" "$bm" /tmp/oslo-bench/llama1b --backend cuda --reps 1 \
      >"$out/profile1.txt" 2>&1
    OSLO_CUDA_PROFILE=2 timeout "$(tl 100)" "$bm" /tmp/oslo-bench/llama1b --backend cuda --reps 1 \
      --prefill-only >"$out/profile2.txt" 2>&1
    OSLO_CUDA_PROFILE=2 timeout "$(tl 100)" "$bm" /tmp/oslo-bench/llama1b --backend cuda --reps 5 \
      --prefill-only >"$out/profile3.txt" 2>&1
    for p in 1 2 3; do
      echo "profile $p:"; grep -A25 "cuda plugin profile" "$out/profile$p.txt" | head -26
    done
  fi
fi
{
  echo "==================== GPU CHECK SUMMARY ===================="
  echo "GPU: $(cat "$out/gpu.txt")"
  echo "ctest -L cuda: $summary_tests"
  [ -n "$ops" ] && echo "$ops"
  echo "world-1 collectives: $coll"
  [ -n "$parts" ] && { echo "parts (limit ${budget} s in all):"; echo -n "$parts"; }
  [ -n "$curves" ] && { echo "training on cuda vs cpu (world 1):"; echo "$curves"; }
  [ -n "$failed" ] && { echo "FAILED:"; echo "$failed"; }
  [ -n "$skipped" ] && { echo "SKIPPED:"; echo "$skipped"; }
  [ -n "$bench" ] && { echo "benchmarks:"; echo -n "$bench"; }
  echo "wall: $(( $(date +%s) - t_start )) s"
  echo "==========================================================="
} | tee "$out/summary.txt"
