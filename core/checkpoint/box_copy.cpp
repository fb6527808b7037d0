#include "core/checkpoint/box_copy.hpp"

#include <algorithm>
#include <cstring>

namespace oslo {

namespace {

constexpr uint64_t kBounceBytes = uint64_t{8} << 20;

std::vector<uint64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<uint64_t> s(shape.size());
  uint64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= static_cast<uint64_t>(shape[i]);
  }
  return s;
}

// Batches runs adjacent in the piece into one read through the bounce
// buffer, then converts (or copies) each run into place.
class RunBatcher {
 public:
  RunBatcher(const BoxSource& src, char* dst, std::vector<char>* bounce)
      : src_(src),
        dst_(dst),
        bounce_(bounce),
        cap_(std::max<uint64_t>(1, kBounceBytes / src.src_size)) {}

  // n elements from piece element `from` to destination element `to`.
  void add(uint64_t from, uint64_t to, uint64_t n) {
    if (n == 0) return;
    if (!src_.convert && n >= cap_) {  // large same-dtype run: straight into place
      flush();
      src_.read(from * src_.src_size, n * src_.src_size, dst_ + to * src_.dst_size);
      return;
    }
    while (n > 0) {
      const uint64_t piece = std::min<uint64_t>(n, cap_);
      if (!runs_.empty() && (from != batch_from_ + batch_n_ || batch_n_ + piece > cap_)) flush();
      if (runs_.empty()) {
        batch_from_ = from;
        batch_n_ = 0;
      }
      runs_.push_back({to, piece, batch_n_});
      batch_n_ += piece;
      from += piece;
      to += piece;
      n -= piece;
    }
  }

  void flush() {
    if (runs_.empty()) return;
    const size_t ss = src_.src_size, ds = src_.dst_size;
    const size_t bytes = static_cast<size_t>(batch_n_ * ss);
    if (bounce_->size() < bytes) bounce_->resize(bytes);
    char* b = bounce_->data();
    src_.read(batch_from_ * ss, bytes, b);
    for (const Run& r : runs_) {
      if (src_.convert)
        src_.convert(b + r.at * ss, dst_ + r.to * ds, static_cast<size_t>(r.n));
      else
        std::memcpy(dst_ + r.to * ds, b + r.at * ss, static_cast<size_t>(r.n * ss));
    }
    runs_.clear();
    batch_n_ = 0;
  }

 private:
  struct Run {
    uint64_t to, n, at;  // destination element, elements, element in the batch
  };
  const BoxSource& src_;
  char* dst_;
  std::vector<char>* bounce_;
  uint64_t cap_;
  std::vector<Run> runs_;
  uint64_t batch_from_ = 0, batch_n_ = 0;
};

}  // namespace

void copy_box(const BoxSource& src, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
              const std::vector<int64_t>& sorg, const std::vector<int64_t>& sshape,
              const std::vector<int64_t>& dorg, const std::vector<int64_t>& dshape, void* dst,
              std::vector<char>* bounce) {
  const int nd = static_cast<int>(lo.size());
  for (int j = 0; j < nd; ++j)
    if (hi[j] <= lo[j]) return;  // empty
  RunBatcher rb(src, static_cast<char*>(dst), bounce);
  if (nd == 0) {  // a scalar
    rb.add(0, 0, 1);
    rb.flush();
    return;
  }
  // Innermost dimension where the box is narrower than the piece or the
  // destination: everything inside it is one contiguous run in both.
  int k = 0;
  for (int j = nd - 1; j >= 0; --j)
    if (hi[j] - lo[j] != sshape[j] || hi[j] - lo[j] != dshape[j]) {
      k = j;
      break;
    }
  const std::vector<uint64_t> ss = strides_of(sshape), ds = strides_of(dshape);
  const uint64_t run = static_cast<uint64_t>(hi[k] - lo[k]) * ss[k];
  std::vector<int64_t> idx(lo.begin(), lo.begin() + k);
  for (;;) {
    uint64_t so = static_cast<uint64_t>(lo[k] - sorg[k]) * ss[k];
    uint64_t dof = static_cast<uint64_t>(lo[k] - dorg[k]) * ds[k];
    for (int j = 0; j < k; ++j) {
      so += static_cast<uint64_t>(idx[j] - sorg[j]) * ss[j];
      dof += static_cast<uint64_t>(idx[j] - dorg[j]) * ds[j];
    }
    rb.add(so, dof, run);
    int j = k - 1;
    for (; j >= 0; --j) {
      if (++idx[j] < hi[j]) break;
      idx[j] = lo[j];
    }
    if (j < 0) break;
  }
  rb.flush();
}

}  // namespace oslo
