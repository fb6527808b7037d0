#!/usr/bin/env bash
# One block in the tree: the transformer block's math (products, norms,
# rotary embedding, softmax, activations' backward, attention) lives in
# core/model/block.cpp, built on the layers tier (core/layers/functional);
# the rest of the model, training, generation and the pipeline call the
# block or the layers, never the backend's math ops themselves. The two
# attention sources plug into the block (the inference runner's KV cache,
# the training pass's keys and values of the call) and may call the
# backend's attention. Lists every other call and fails.
set -euo pipefail
root=${1:?usage: test_one_block.sh SOURCE_DIR}
cd "$root"
ops='matmul|matmul_act|matmul_packed|norm|norm_backward|residual_norm|rope|softmax|softmax_backward|unary_backward|attention'
allowed='^core/(model/(inference|micro_pass)|serve/paged_kv)\.cpp:[0-9]+:.*\bbe\.attention\('
found=$(grep -nE "(\bbe_?|backend\(\))\.($ops)\(" core/model/*.cpp core/train/*.cpp \
          core/generate/*.cpp core/pipeline/*.cpp core/checkpoint/*.cpp core/serve/*.cpp |
        grep -v '^core/model/block\.cpp:' | grep -vE "$allowed" || true)
if [ -n "$found" ]; then
  echo "block math outside core/model/block.cpp (call the block or core/layers/functional):"
  echo "$found"
  exit 1
fi
# The linear's backward exists once: in core/layers/functional.cpp.
dups=$(grep -nE 'transposed\(dyw?\)' core/model/*.cpp core/train/*.cpp core/layers/*.cpp |
       grep -v '^core/layers/functional\.cpp:' || true)
if [ -n "$dups" ]; then
  echo "a linear's weight gradient written outside core/layers/functional.cpp:"
  echo "$dups"
  exit 1
fi
echo "one block: ok"
