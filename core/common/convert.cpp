#include "core/common/convert.hpp"

#include <cstdint>
#include <cstring>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {

bool dtypes_convertible(oslo_dtype a, oslo_dtype b) {
  return a == b || dtype_is_float(a) == dtype_is_float(b);
}

void convert_host(oslo_dtype sdt, const void* src, oslo_dtype ddt, void* dst, size_t n,
                  const std::string& tensor) {
  if (n == 0) return;
  if (sdt == ddt) {
    std::memcpy(dst, src, n * dtype_size(sdt));
    return;
  }
  if (dtype_is_float(sdt) && dtype_is_float(ddt)) {
    if (sdt == OSLO_DTYPE_F32) {
      from_f32(ddt, static_cast<const float*>(src), dst, n);
    } else if (ddt == OSLO_DTYPE_F32) {
      to_f32(sdt, src, static_cast<float*>(dst), n);
    } else {  // f16 <-> bf16 through f32, a block at a time
      float tmp[1024];
      const char* s = static_cast<const char*>(src);
      char* d = static_cast<char*>(dst);
      for (size_t i = 0; i < n; i += 1024) {
        size_t m = n - i < 1024 ? n - i : 1024;
        to_f32(sdt, s + i * 2, tmp, m);
        from_f32(ddt, tmp, d + i * 2, m);
      }
    }
    return;
  }
  if (sdt == OSLO_DTYPE_I32 && ddt == OSLO_DTYPE_I64) {
    for (size_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, static_cast<const char*>(src) + 4 * i, 4);
      int64_t w = v;
      std::memcpy(static_cast<char*>(dst) + 8 * i, &w, 8);
    }
    return;
  }
  if (sdt == OSLO_DTYPE_I64 && ddt == OSLO_DTYPE_I32) {
    for (size_t i = 0; i < n; ++i) {
      int64_t v;
      std::memcpy(&v, static_cast<const char*>(src) + 8 * i, 8);
      OSLO_CHECK(v >= INT32_MIN && v <= INT32_MAX, OSLO_ERR_DTYPE, "tensor ", quote(tensor),
                 ": value ", v, " does not fit i32");
      int32_t w = static_cast<int32_t>(v);
      std::memcpy(static_cast<char*>(dst) + 4 * i, &w, 4);
    }
    return;
  }
  fail(OSLO_ERR_DTYPE, "tensor ", quote(tensor), ": cannot convert ", dtype_name(sdt), " to ",
       dtype_name(ddt));
}

}  // namespace oslo
