// libFuzzer target for oslo's GGUF reader (core/checkpoint/gguf): any input
// is either rejected with OSLO_ERR_FORMAT naming the buffer or accepted with
// every layout invariant holding, each tensor dequantized without reading a
// byte outside it (tests/gguf/gguf_check.hpp aborts otherwise). Seeds and
// regressions live in tests/gguf/corpus, which the ctest test gguf_corpus
// replays.
//
// Build: cmake -S tests/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++
//        (standalone), or -DOSLO_BUILD_FUZZERS=ON in a clang build of oslo.
// Run:   build-fuzz/fuzz_gguf -dict=tests/fuzz/gguf.dict -max_len=4096 \
//        CORPUS_DIR tests/gguf/corpus
#include <cstddef>
#include <cstdint>

#include "tests/gguf/gguf_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gguf_check::check_buffer(data, size);
  return 0;
}
