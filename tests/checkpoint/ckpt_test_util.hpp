// Helpers of the checkpoint tests: temporary directories, file bytes, a tiny
// Communicator over an in-process HashStore for ranks that are threads, and a
// runner that starts one thread per rank and collects each rank's outcome.
//
// cmocka assertions longjmp, so they are only ever used on the main thread;
// rank threads report through RankResult.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/communicator.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/rendezvous/hash_store.hpp"
#include "tests/common/temp_dir.hpp"

namespace ckpt_test {

inline std::string temp_dir() {
  return oslo_test::temp_dir("oslo-ckpt");
}
using oslo_test::remove_tree;

inline std::string read_bytes(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

inline void write_bytes(const std::string& path, const std::string& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::perror(path.c_str());
    std::abort();
  }
  if (!data.empty() && std::fwrite(data.data(), 1, data.size(), f) != data.size()) std::abort();
  std::fclose(f);
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Sorted names in a directory.
inline std::vector<std::string> list(const std::string& dir) {
  std::vector<std::string> out;
  std::string cmd = "ls -1A '" + dir + "' 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char line[4096];
  while (std::fgets(line, sizeof line, p)) {
    std::string s = line;
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    out.push_back(s);
  }
  pclose(p);
  std::sort(out.begin(), out.end());
  return out;
}

// Runs fn and returns the status of the oslo::Error it throws (OSLO_OK if it
// returns), storing the message in *msg.
template <typename Fn>
oslo_status status_of(Fn&& fn, std::string* msg = nullptr) {
  try {
    fn();
  } catch (const oslo::Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  }
  return OSLO_OK;
}

// A test-only communicator for ranks that are threads sharing one HashStore:
// barrier, broadcast, all_reduce and all_gather through store keys (one key
// per rank and operation). Enough for the checkpoint's control messages.
class StoreComm : public oslo::Communicator {
 public:
  StoreComm(oslo::HashStore* store, int rank, int size, std::string prefix = "c")
      : store_(store), rank_(rank), size_(size), prefix_(std::move(prefix)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* transport() const override { return "test-store"; }

  void all_reduce(const void* in, void* out, size_t count, oslo_dtype dt,
                  oslo_reduce_op op) override {
    const size_t bytes = count * oslo::dtype_size(dt);
    std::vector<std::vector<uint8_t>> all = exchange(in, bytes);
    std::vector<uint8_t> acc = all[0];
    for (int r = 1; r < size_; ++r) reduce(acc.data(), all[r].data(), count, dt, op);
    if (bytes) std::memcpy(out, acc.data(), bytes);
  }
  void all_gather(const void* in, void* out, size_t count, oslo_dtype dt) override {
    const size_t bytes = count * oslo::dtype_size(dt);
    std::vector<std::vector<uint8_t>> all = exchange(in, bytes);
    for (int r = 0; r < size_; ++r)
      if (bytes) std::memcpy(static_cast<char*>(out) + r * bytes, all[r].data(), bytes);
  }
  void reduce_scatter(const void*, void*, size_t, oslo_dtype, oslo_reduce_op) override {
    oslo::fail(OSLO_ERR_NOT_SUPPORTED, "test communicator: reduce_scatter");
  }
  void broadcast(void* buf, size_t count, oslo_dtype dt, int root) override {
    const size_t bytes = count * oslo::dtype_size(dt);
    const std::string key = prefix_ + "/" + std::to_string(seq_++) + "/bcast";
    if (rank_ == root) {
      const uint8_t* p = static_cast<const uint8_t*>(buf);
      store_->set(key, std::vector<uint8_t>(p, p + bytes));
    } else {
      std::vector<uint8_t> v = store_->get(key, oslo::Deadline(kTimeout));
      if (bytes) std::memcpy(buf, v.data(), bytes);
    }
  }
  void send(const void*, size_t, int) override {
    oslo::fail(OSLO_ERR_NOT_SUPPORTED, "test communicator: send");
  }
  void recv(void*, size_t, int) override {
    oslo::fail(OSLO_ERR_NOT_SUPPORTED, "test communicator: recv");
  }
  void barrier() override { exchange(nullptr, 0); }
  void abort() noexcept override {}

 private:
  static constexpr double kTimeout = 60;

  std::vector<std::vector<uint8_t>> exchange(const void* in, size_t bytes) {
    const std::string base = prefix_ + "/" + std::to_string(seq_++) + "/";
    const uint8_t* p = static_cast<const uint8_t*>(in);
    store_->set(base + std::to_string(rank_), std::vector<uint8_t>(p, p + bytes));
    std::vector<std::vector<uint8_t>> all;
    for (int r = 0; r < size_; ++r)
      all.push_back(store_->get(base + std::to_string(r), oslo::Deadline(kTimeout)));
    return all;
  }
  template <typename T>
  static void reduce_t(T* acc, const T* v, size_t n, oslo_reduce_op op) {
    for (size_t i = 0; i < n; ++i) {
      switch (op) {
        case OSLO_REDUCE_SUM:
        case OSLO_REDUCE_AVG: acc[i] += v[i]; break;
        case OSLO_REDUCE_MAX: acc[i] = std::max(acc[i], v[i]); break;
        case OSLO_REDUCE_MIN: acc[i] = std::min(acc[i], v[i]); break;
        default: oslo::fail(OSLO_ERR_NOT_SUPPORTED, "test communicator: reduce op");
      }
    }
  }
  static void reduce(uint8_t* acc, const uint8_t* v, size_t n, oslo_dtype dt, oslo_reduce_op op) {
    switch (dt) {
      case OSLO_DTYPE_I32:
        reduce_t(reinterpret_cast<int32_t*>(acc), reinterpret_cast<const int32_t*>(v), n, op);
        return;
      case OSLO_DTYPE_I64:
        reduce_t(reinterpret_cast<int64_t*>(acc), reinterpret_cast<const int64_t*>(v), n, op);
        return;
      case OSLO_DTYPE_F32:
        reduce_t(reinterpret_cast<float*>(acc), reinterpret_cast<const float*>(v), n, op);
        return;
      default: oslo::fail(OSLO_ERR_NOT_SUPPORTED, "test communicator: dtype");
    }
  }

  oslo::HashStore* store_;
  int rank_, size_;
  std::string prefix_;
  uint64_t seq_ = 0;
};

struct RankResult {
  oslo_status status = OSLO_OK;
  std::string message;
};

// Runs fn(rank) on `n` threads; returns each rank's outcome.
inline std::vector<RankResult> run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<RankResult> res(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const oslo::Error& e) {
        res[r].status = e.status();
        res[r].message = e.what();
      } catch (const std::exception& e) {
        res[r].status = OSLO_ERR_INTERNAL;
        res[r].message = std::string("std::exception: ") + e.what();
      }
    });
  for (auto& t : threads) t.join();
  return res;
}

}  // namespace ckpt_test
