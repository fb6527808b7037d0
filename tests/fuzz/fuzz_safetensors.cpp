// libFuzzer target for oslo's safetensors parser: any input is either
// rejected with OSLO_ERR_FORMAT or accepted with every layout invariant
// holding and a lossless round trip through the writer (tests/checkpoint/
// st_check.hpp aborts otherwise). Interesting inputs go to
// tests/checkpoint/corpus, which a normal ctest test replays.
//
// Build: cmake -S tests/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++
//        (standalone), or -DOSLO_BUILD_FUZZERS=ON in a clang build of oslo.
// Run:   build-fuzz/fuzz_safetensors -dict=tests/fuzz/safetensors.dict \
//        -max_len=4096 CORPUS_DIR tests/checkpoint/corpus
#include <cstddef>
#include <cstdint>

#include "tests/checkpoint/st_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  st_check::check_buffer(data, size);
  return 0;
}
