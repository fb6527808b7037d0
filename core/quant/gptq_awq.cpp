// GPTQ/AWQ tensors to Q4_G128 rows (gptq_awq.hpp).
#include "core/quant/gptq_awq.hpp"

#include <algorithm>
#include <cstring>

#include "core/common/error.hpp"
#include "core/common/shape_str.hpp"
#include "core/quant/quant.hpp"

namespace oslo {
namespace quant {

namespace {

const char* kind_name(PackedKind k) {
  return k == PackedKind::Gptq ? "gptq" : "awq";
}

void expect_shape(const PackedLinear& p, const char* what, const std::vector<int64_t>& got,
                  const std::vector<int64_t>& want) {
  OSLO_CHECK(got == want, OSLO_ERR_SHAPE, kind_name(p.kind), " linear ", quote(p.name), ": ", what,
             " is ", shape_str(got), " but in_features ", p.in_features, ", out_features ",
             p.out_features, " and group_size ", p.group_size, " need ", shape_str(want));
}

int nibble(int32_t word, int i) {
  return static_cast<int>((static_cast<uint32_t>(word) >> (4 * i)) & 0xF);
}

}  // namespace

void check_packed(const PackedLinear& p) {
  const std::string who = std::string(kind_name(p.kind)) + " linear " + quote(p.name);
  OSLO_CHECK(p.group_size == static_cast<int64_t>(kGroup128), OSLO_ERR_NOT_SUPPORTED, who,
             ": group_size ", p.group_size,
             " is not supported: oslo's q4_g128 holds groups of 128 inputs only");
  const int64_t K = p.in_features, N = p.out_features, G = p.group_size;
  OSLO_CHECK(K > 0 && N > 0, OSLO_ERR_SHAPE, who, ": in_features ", K, " and out_features ", N,
             " must be positive");
  OSLO_CHECK(K % G == 0, OSLO_ERR_NOT_SUPPORTED, who, ": in_features ", K,
             " is not a multiple of the group size ", G);
  OSLO_CHECK(N % 8 == 0, OSLO_ERR_SHAPE, who, ": out_features ", N,
             " is not a multiple of 8 (the zero points pack 8 outputs per int32)");
  if (p.kind == PackedKind::Gptq) {
    expect_shape(p, "qweight", p.qweight_shape, {K / 8, N});
    expect_shape(p, "qzeros", p.qzeros_shape, {K / G, N / 8});
    expect_shape(p, "scales", p.scales_shape, {K / G, N});
    if (p.g_idx || !p.g_idx_shape.empty()) expect_shape(p, "g_idx", p.g_idx_shape, {K});
  } else {
    expect_shape(p, "qweight", p.qweight_shape, {K, N / 8});
    expect_shape(p, "qzeros", p.qzeros_shape, {K / G, N / 8});
    expect_shape(p, "scales", p.scales_shape, {K / G, N});
    OSLO_CHECK(p.g_idx == nullptr && p.g_idx_shape.empty(), OSLO_ERR_INVALID_ARGUMENT, who,
               ": AWQ has no g_idx");
  }
}

std::vector<int64_t> act_order_permutation(const PackedLinear& p) {
  check_packed(p);
  if (!p.g_idx) return {};
  const int64_t K = p.in_features, G = p.group_size, ng = K / G;
  bool trivial = true;
  std::vector<int64_t> count(static_cast<size_t>(ng), 0);
  for (int64_t k = 0; k < K; ++k) {
    const int32_t g = p.g_idx[k];
    OSLO_CHECK(g >= 0 && g < ng, OSLO_ERR_FORMAT, "gptq linear ", quote(p.name), ": g_idx[", k,
               "] = ", g, " is outside the ", ng, " groups");
    ++count[static_cast<size_t>(g)];
    trivial = trivial && g == k / G;
  }
  if (trivial) return {};
  for (int64_t g = 0; g < ng; ++g)
    OSLO_CHECK(count[static_cast<size_t>(g)] == G, OSLO_ERR_FORMAT, "gptq linear ", quote(p.name),
               ": g_idx gives group ", g, " ", count[static_cast<size_t>(g)],
               " inputs, not the group size ", G);
  std::vector<int64_t> perm(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) perm[static_cast<size_t>(k)] = k;
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t a, int64_t b) { return p.g_idx[a] < p.g_idx[b]; });
  return perm;
}

void packed_to_q4_g128(const PackedLinear& p, const std::vector<int64_t>& perm, int64_t row_begin,
                       int64_t rows, uint8_t* dst) {
  check_packed(p);
  OSLO_CHECK(p.qweight && p.qzeros && p.scales, OSLO_ERR_INVALID_ARGUMENT, kind_name(p.kind),
             " linear ", quote(p.name), ": qweight, qzeros and scales are needed");
  const int64_t K = p.in_features, N = p.out_features, G = p.group_size, ng = K / G;
  OSLO_CHECK(row_begin >= 0 && rows >= 0 && row_begin <= N && rows <= N - row_begin,
             OSLO_ERR_INVALID_ARGUMENT, kind_name(p.kind), " linear ", quote(p.name), ": rows [",
             row_begin, ", ", row_begin + rows, ") are outside its ", N, " outputs");
  OSLO_CHECK(perm.empty() || static_cast<int64_t>(perm.size()) == K, OSLO_ERR_INVALID_ARGUMENT,
             "gptq linear ", quote(p.name), ": the permutation has ", perm.size(),
             " entries, not in_features ", K);
  const bool gptq = p.kind == PackedKind::Gptq;
  const size_t rb = static_cast<size_t>(ng) * 68;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = row_begin + r;
    uint8_t* row = dst + static_cast<size_t>(r) * rb;
    for (int64_t g = 0; g < ng; ++g) {
      uint8_t* b = row + static_cast<size_t>(g) * 68;
      const uint16_t d = p.scales[g * N + n];
      const int32_t zw = p.qzeros[g * (N / 8) + n / 8];
      int z = nibble(zw, gptq ? static_cast<int>(n % 8) : kAwqNibble[n % 8]);
      if (gptq && p.zeros_minus_one) ++z;
      OSLO_CHECK(z <= 15, OSLO_ERR_FORMAT, "gptq linear ", quote(p.name), ": group ", g,
                 " of output ", n,
                 " has zero point 16 (stored 15 in the classic format, "
                 "zero - 1): q4_g128 holds zero points 0..15 only");
      b[0] = static_cast<uint8_t>(d & 0xff);
      b[1] = static_cast<uint8_t>(d >> 8);
      b[2] = static_cast<uint8_t>(z);
      b[3] = 0;
      std::memset(b + 4, 0, 64);
      for (int64_t j = 0; j < G; ++j) {
        const int64_t pos = g * G + j;
        const int64_t k = perm.empty() ? pos : perm[static_cast<size_t>(pos)];
        if (gptq && p.g_idx)
          OSLO_CHECK(p.g_idx[k] == g, OSLO_ERR_FORMAT, "gptq linear ", quote(p.name), ": input ", k,
                     " at position ", pos, " has g_idx ", p.g_idx[k], ", not ", g,
                     " (use act_order_permutation)");
        const int q = gptq ? nibble(p.qweight[(k / 8) * N + n], static_cast<int>(k % 8))
                           : nibble(p.qweight[k * (N / 8) + n / 8], kAwqNibble[n % 8]);
        b[4 + (j & 63)] |= static_cast<uint8_t>(j < 64 ? q : q << 4);
      }
    }
  }
}

}  // namespace quant
}  // namespace oslo
