#!/bin/sh
# test_cli_device.sh OSLO_BINARY MODEL_DIR BUILD_DIR
set -u
oslo=$1 model=$2 build=$3
fails=0 n=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OSLO_BACKEND_PATH=$build
export OSLO_BACKEND_PATH

# expect STATUS NEEDLE ARGS...: `oslo ARGS` exits with STATUS and its stderr
# holds NEEDLE.
expect() {
  want=$1 needle=$2
  shift 2
  n=$((n + 1))
  "$oslo" "$@" >"$tmp/out" 2>"$tmp/err"
  got=$?
  if [ "$got" -ne "$want" ] || ! grep -qF -- "$needle" "$tmp/err"; then
    fails=$((fails + 1))
    echo "FAIL: oslo $* -> exit $got (want $want), stderr:"
    sed 's/^/  /' "$tmp/err"
    echo "  (wanted it to hold: $needle)"
  fi
}

gen="generate --model $model --prompt-ids 1,2,3 --max-new-tokens 2 --ids"
# Bad values: exit 2 before any context exists.
expect 2 '--device must be cpu, cuda or cuda:N' $gen --device gpu
expect 2 '--device must be cpu, cuda or cuda:N' $gen --device cuda:x
expect 2 '--device must be cpu, cuda or cuda:N' $gen --device cuda:
expect 2 '--device must be cpu, cuda or cuda:N' $gen --device cuda:-1
expect 2 '--backend-options: not valid JSON' $gen --backend-options '{"device": '
expect 2 '--backend-options must be a JSON object' $gen --backend-options '[1, 2]'
expect 2 'disagree' $gen --device cpu --backend cuda
expect 2 'needs the cuda backend' $gen --device cuda:0 --backend cpu
expect 2 'but --backend-options has 3' $gen --device cuda:1 --backend-options '{"device": 3}'
expect 2 '--device needs a value' $gen --device
expect 2 '--device must be cpu' embed --model $model --sentence hi --device tpu
# "cuda" without its plugin: unavailable, naming the plugin and the way out.
if [ ! -f "$build/liboslo_backend_cuda.so" ]; then
  expect 1 'OSLO_ERR_BACKEND_UNAVAILABLE' $gen --device cuda
  expect 1 'liboslo_backend_cuda.so' $gen --device cuda:1
  expect 1 '--device cpu' $gen --device cuda
fi
# libtorch's CPU-only build refuses its CUDA device (when the plugin exists).
if [ -f "$build/liboslo_backend_torch.so" ]; then
  expect 1 'no CUDA or sees no GPU' $gen --device cuda:0 --backend torch
fi
# Backend options reach the backend: the CPU backend's own errors, none here;
# an unknown torch option is the torch plugin's error.
if [ -f "$build/liboslo_backend_torch.so" ]; then
  expect 1 'unknown extra_json key "bogus"' $gen --backend torch \
    --backend-options '{"bogus": 1}'
fi

# --device cpu works, and equals the default.
n=$((n + 1))
a=$("$oslo" $gen --device cpu 2>"$tmp/err")
st=$?
b=$("$oslo" $gen 2>>"$tmp/err")
if [ $st -ne 0 ] || [ -z "$a" ] || [ "$a" != "$b" ]; then
  fails=$((fails + 1))
  echo "FAIL: generate --device cpu (exit $st): '$a' vs default '$b'"
  sed 's/^/  /' "$tmp/err"
fi
n=$((n + 1))
c=$("$oslo" $gen --device cpu --backend-options '{}' 2>"$tmp/err")
if [ "$c" != "$a" ]; then
  fails=$((fails + 1))
  echo "FAIL: --backend-options '{}' changed the output: '$c' vs '$a'"
fi
echo "cli device: $((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
