#include "core/comm/control.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/common/error.hpp"

namespace oslo {

Control::Control(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {
  OSLO_CHECK(comm_, OSLO_ERR_INTERNAL, "control: no communicator");
}

Control::Control(std::shared_ptr<Communicator> comm, ControlStaging staging)
    : comm_(std::move(comm)), staging_(std::move(staging)), staged_(true) {
  OSLO_CHECK(comm_ && staging_.alloc && staging_.release && staging_.put && staging_.get,
             OSLO_ERR_INTERNAL, "control: incomplete staging");
}

Control::~Control() {
  if (buf_) staging_.release(buf_, cap_);
}

void Control::staged(int64_t* host, size_t in_words, size_t words, size_t out_words,
                     const std::function<void(int64_t*)>& op) {
  if (!staged_) {
    op(host);
    return;
  }
  const size_t bytes = words * sizeof(int64_t);
  if (bytes > cap_) {
    if (buf_) staging_.release(buf_, cap_);
    buf_ = nullptr;
    cap_ = 0;
    const size_t want = std::max<size_t>(bytes, 4096);
    buf_ = staging_.alloc(want);
    cap_ = want;
  }
  auto* dev = static_cast<int64_t*>(buf_);
  if (in_words) staging_.put(dev, host, in_words * sizeof(int64_t));
  op(dev);
  if (out_words) staging_.get(host, dev, out_words * sizeof(int64_t));
}

void Control::all_reduce(int64_t* v, size_t n, oslo_reduce_op op) {
  if (size() == 1 || n == 0) return;
  staged(v, n, n, n, [&](int64_t* b) { comm_->all_reduce(b, b, n, OSLO_DTYPE_I64, op); });
}

void Control::all_gather(const int64_t* in, int64_t* out, size_t n) {
  const size_t k = static_cast<size_t>(size());
  if (k == 1) {
    std::copy(in, in + n, out);
    return;
  }
  if (n == 0) return;
  // The communicator gathers in place: this rank's values at its slot.
  std::copy(in, in + n, out + static_cast<size_t>(rank()) * n);
  if (!staged_) {
    comm_->all_gather(out + static_cast<size_t>(rank()) * n, out, n, OSLO_DTYPE_I64);
    return;
  }
  std::vector<int64_t> mine(in, in + n);
  staged(out, 0, n * k, n * k, [&](int64_t* b) {
    staging_.put(b + static_cast<size_t>(rank()) * n, mine.data(), n * sizeof(int64_t));
    comm_->all_gather(b + static_cast<size_t>(rank()) * n, b, n, OSLO_DTYPE_I64);
  });
}

void Control::broadcast(int64_t* v, size_t n, int root) {
  OSLO_CHECK(root >= 0 && root < size(), OSLO_ERR_INTERNAL, "control: broadcast root ", root,
             " outside a group of ", size());
  if (size() == 1 || n == 0) return;
  staged(v, rank() == root ? n : 0, n, rank() == root ? 0 : n,
         [&](int64_t* b) { comm_->broadcast(b, n, OSLO_DTYPE_I64, root); });
}

std::vector<std::string> Control::all_gather_strings(const std::string& s) {
  const int n = size();
  if (n == 1) return {s};
  // The longest length first, then every string padded to it (in 8-byte
  // words after a length word).
  int64_t maxlen = static_cast<int64_t>(s.size());
  all_reduce(&maxlen, 1, OSLO_REDUCE_MAX);
  const size_t words = 1 + (static_cast<size_t>(maxlen) + 7) / 8;
  std::vector<int64_t> mine(words, 0), all(words * static_cast<size_t>(n), 0);
  mine[0] = static_cast<int64_t>(s.size());
  std::memcpy(mine.data() + 1, s.data(), s.size());
  all_gather(mine.data(), all.data(), words);
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r) {
    const int64_t* p = all.data() + words * static_cast<size_t>(r);
    OSLO_CHECK(p[0] >= 0 && static_cast<size_t>(p[0]) <= (words - 1) * 8, OSLO_ERR_COMM,
               "control: rank ", r, " sent a string of ", p[0], " bytes in ", words - 1, " words");
    out.emplace_back(reinterpret_cast<const char*>(p + 1), static_cast<size_t>(p[0]));
  }
  return out;
}

std::string Control::broadcast_string(const std::string& s, int root) {
  if (size() == 1) return s;
  int64_t len = rank() == root ? static_cast<int64_t>(s.size()) : 0;
  broadcast(&len, 1, root);
  OSLO_CHECK(len >= 0, OSLO_ERR_COMM, "control: rank ", root, " sent a string of ", len, " bytes");
  std::vector<int64_t> buf((static_cast<size_t>(len) + 7) / 8, 0);
  if (rank() == root) std::memcpy(buf.data(), s.data(), s.size());
  broadcast(buf.data(), buf.size(), root);
  return std::string(reinterpret_cast<const char*>(buf.data()), static_cast<size_t>(len));
}

void Control::barrier() {
  if (size() > 1) comm_->barrier();
}

}  // namespace oslo
