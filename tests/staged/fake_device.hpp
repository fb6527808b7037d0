// A fake device for the staged communicator's tests: "device" memory is
// ordinary host memory that the fake device tracks, so a test can tell device
// buffers from host buffers, see every copy between them, and count the host
// staging the communicator allocates.
//
// FakeDevice::staging() is the DeviceStaging a backend would give: check()
// accepts only ranges inside one tracked device allocation; to_host() and
// to_device() copy, count, and record a violation when a side is not what it
// must be (the device side inside a device allocation, the host side inside
// staging from host_alloc()); host_alloc()/host_free() are tracked apart.
// Every allocation has guard bytes on both sides, checked when it is freed.
//
// DeviceMirror lets the host-memory suites of tests/shm run through the staged
// path unchanged: a Communicator that mirrors each call's host buffers into
// fake device buffers (overlapping buffers share one allocation, so in-place
// calls stay in place), calls its StagedCommunicator, and copies every
// mirrored buffer back (inputs too: a staged layer that wrote to an input
// shows in the suite's checks).
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/comm/staged_communicator.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace stagedtest {

using oslo::Communicator;
using oslo::DeviceStaging;
using oslo::StagedCommunicator;

class FakeDevice {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kGuardByte = 0xfd;

  struct Counters {
    size_t to_host_calls = 0, to_host_bytes = 0;
    size_t to_device_calls = 0, to_device_bytes = 0;
    size_t host_allocs = 0, host_frees = 0, host_live = 0, host_bytes_max = 0;
    size_t dev_live = 0;
  };

  // Sabotage switches for the tests that prove the harness can fail: copies
  // that are counted but do nothing.
  bool drop_to_host = false;
  bool drop_to_device = false;

  ~FakeDevice() {
    for (auto& a : dev_) ::operator delete(reinterpret_cast<uint8_t*>(a.first) - kGuard);
    for (auto& a : host_) ::operator delete(reinterpret_cast<uint8_t*>(a.first) - kGuard);
  }

  void* alloc(size_t bytes) {
    std::lock_guard<std::mutex> l(mu_);
    void* p = guarded(bytes);
    dev_[reinterpret_cast<uintptr_t>(p)] = bytes;
    ++c_.dev_live;
    return p;
  }
  void free(void* p) {
    std::lock_guard<std::mutex> l(mu_);
    release(dev_, p, "device");
    --c_.dev_live;
  }

  // "" when [p, p + bytes) lies inside one device allocation.
  std::string check(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> l(mu_);
    return why_not(dev_, p, bytes, "fake device");
  }

  DeviceStaging staging() {
    DeviceStaging s;
    s.backend = "'fake' backend";
    s.check = [this](const void* p, size_t bytes) { return check(p, bytes); };
    s.to_host = [this](void* host, const void* dev, size_t bytes) {
      std::lock_guard<std::mutex> l(mu_);
      ++c_.to_host_calls;
      c_.to_host_bytes += bytes;
      if (!sides_ok("to_host", host, dev, bytes) || drop_to_host) return;
      std::memcpy(host, dev, bytes);
    };
    s.to_device = [this](void* dev, const void* host, size_t bytes) {
      std::lock_guard<std::mutex> l(mu_);
      ++c_.to_device_calls;
      c_.to_device_bytes += bytes;
      if (!sides_ok("to_device", host, dev, bytes) || drop_to_device) return;
      std::memcpy(dev, host, bytes);
    };
    s.host_alloc = [this](size_t bytes) {
      std::lock_guard<std::mutex> l(mu_);
      void* p = guarded(bytes);
      host_[reinterpret_cast<uintptr_t>(p)] = bytes;
      ++c_.host_allocs;
      ++c_.host_live;
      if (bytes > c_.host_bytes_max) c_.host_bytes_max = bytes;
      return p;
    };
    s.host_free = [this](void* p) {
      std::lock_guard<std::mutex> l(mu_);
      release(host_, p, "host staging");
      ++c_.host_frees;
      --c_.host_live;
    };
    return s;
  }

  Counters counters() {
    std::lock_guard<std::mutex> l(mu_);
    return c_;
  }
  // What went wrong so far ("" if nothing): a copy with a wrong side, a free
  // of unknown memory, overwritten guard bytes.
  std::string violations() {
    std::lock_guard<std::mutex> l(mu_);
    std::string s;
    for (auto& v : violations_) s += v + "\n";
    return s;
  }

 private:
  using Allocs = std::map<uintptr_t, size_t>;  // start -> bytes

  void* guarded(size_t bytes) {
    uint8_t* b = static_cast<uint8_t*>(::operator new(bytes + 2 * kGuard));
    std::memset(b, kGuardByte, kGuard);
    std::memset(b + kGuard + bytes, kGuardByte, kGuard);
    return b + kGuard;
  }

  void release(Allocs& a, void* p, const char* what) {
    auto it = a.find(reinterpret_cast<uintptr_t>(p));
    if (it == a.end()) {
      violations_.push_back(oslo::str("free of ", p, ", which is no ", what, " allocation"));
      return;
    }
    uint8_t* b = static_cast<uint8_t*>(p) - kGuard;
    for (size_t i = 0; i < kGuard; ++i)
      if (b[i] != kGuardByte || b[kGuard + it->second + i] != kGuardByte) {
        violations_.push_back(oslo::str("guard bytes of the ", what, " allocation of ", it->second,
                                        " bytes at ", p, " were overwritten"));
        break;
      }
    a.erase(it);
    ::operator delete(b);
  }

  static std::string why_not(const Allocs& a, const void* p, size_t bytes, const char* what) {
    const uintptr_t u = reinterpret_cast<uintptr_t>(p);
    auto it = a.upper_bound(u);
    if (it == a.begin()) return oslo::str("not inside any ", what, " allocation");
    --it;
    if (u >= it->first + it->second && !(u == it->first && bytes == 0))
      return oslo::str("not inside any ", what, " allocation");
    if (u + bytes > it->first + it->second)
      return oslo::str("runs ", u + bytes - (it->first + it->second), " bytes past the end of the ",
                       what, " allocation of ", it->second, " bytes");
    return "";
  }

  bool sides_ok(const char* call, const void* host, const void* dev, size_t bytes) {
    std::string d = why_not(dev_, dev, bytes, "fake device");
    std::string h = why_not(host_, host, bytes, "host staging");
    if (!d.empty()) violations_.push_back(oslo::str(call, ": device side ", dev, ": ", d));
    if (!h.empty()) violations_.push_back(oslo::str(call, ": host side ", host, ": ", h));
    return d.empty() && h.empty();
  }

  std::mutex mu_;
  Allocs dev_, host_;
  Counters c_;
  std::vector<std::string> violations_;
};

// One call's host buffers mirrored in device memory. Buffers that overlap
// share one device allocation, at the same offsets.
class Mirror {
 public:
  explicit Mirror(FakeDevice& dev) : dev_(dev) {}
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;
  ~Mirror() {
    for (auto& r : regions_) dev_.free(r.dev);
  }

  // Adds [p, p + bytes) (call add() for every buffer first, then map()).
  void add(const void* p, size_t bytes) {
    if (!p) return;
    uint8_t* b = const_cast<uint8_t*>(static_cast<const uint8_t*>(p));
    uint8_t* e = b + bytes;
    for (size_t i = 0; i < regions_.size(); ++i) {
      Region& r = regions_[i];
      if (b <= r.host + r.bytes && r.host <= e) {  // overlaps or touches: merge
        uint8_t* nb = std::min(b, r.host);
        uint8_t* ne = std::max(e, r.host + r.bytes);
        regions_.erase(regions_.begin() + static_cast<long>(i));
        add(nb, static_cast<size_t>(ne - nb));
        return;
      }
    }
    regions_.push_back({b, bytes, nullptr});
  }
  // Allocates and uploads every region.
  void upload() {
    for (auto& r : regions_) {
      r.dev = static_cast<uint8_t*>(dev_.alloc(r.bytes));
      if (r.bytes) std::memcpy(r.dev, r.host, r.bytes);
    }
  }
  // The device address of host address p (null stays null).
  void* map(const void* p) const {
    if (!p) return nullptr;
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (auto& r : regions_)
      if (b >= r.host && b <= r.host + r.bytes) return r.dev + (b - r.host);
    return nullptr;
  }
  void download() {
    for (auto& r : regions_)
      if (r.bytes) std::memcpy(r.host, r.dev, r.bytes);
  }

 private:
  struct Region {
    uint8_t* host;
    size_t bytes;
    uint8_t* dev;
  };
  FakeDevice& dev_;
  std::vector<Region> regions_;
};

// A Communicator over host memory that runs every call through a
// StagedCommunicator on fake device memory.
class DeviceMirror : public Communicator {
 public:
  // memory_check false: staged like a backend that has no memory check.
  DeviceMirror(std::unique_ptr<Communicator> host, const std::string& group,
               bool memory_check = true)
      : dev_(std::make_unique<FakeDevice>()) {
    DeviceStaging s = dev_->staging();
    if (!memory_check) s.check = nullptr;
    staged_ = std::make_unique<StagedCommunicator>(std::move(host), std::move(s), group);
  }
  ~DeviceMirror() override {
    staged_.reset();  // frees its staging through dev_
  }

  FakeDevice& device() { return *dev_; }
  StagedCommunicator& staged() { return *staged_; }
  // Destroys the staged communicator (and its host transport) now.
  void close() { staged_.reset(); }

  int rank() const override { return staged_->rank(); }
  int size() const override { return staged_->size(); }
  const char* transport() const override { return staged_->transport(); }

  void all_reduce(const void* in, void* out, size_t count, oslo_dtype dt,
                  oslo_reduce_op op) override {
    const size_t bytes = count * oslo::dtype_size(dt);
    run({{in, bytes}, {out, bytes}},
        [&](Mirror& m) { staged_->all_reduce(m.map(in), m.map(out), count, dt, op); });
  }
  void all_gather(const void* in, void* out, size_t count, oslo_dtype dt) override {
    const size_t bytes = count * oslo::dtype_size(dt);
    run({{in, bytes}, {out, bytes * static_cast<size_t>(size())}},
        [&](Mirror& m) { staged_->all_gather(m.map(in), m.map(out), count, dt); });
  }
  void reduce_scatter(const void* in, void* out, size_t count, oslo_dtype dt,
                      oslo_reduce_op op) override {
    const size_t bytes = count * oslo::dtype_size(dt);
    run({{in, bytes * static_cast<size_t>(size())}, {out, bytes}},
        [&](Mirror& m) { staged_->reduce_scatter(m.map(in), m.map(out), count, dt, op); });
  }
  void broadcast(void* buf, size_t count, oslo_dtype dt, int root) override {
    run({{buf, count * oslo::dtype_size(dt)}},
        [&](Mirror& m) { staged_->broadcast(m.map(buf), count, dt, root); });
  }
  void send(const void* buf, size_t bytes, int peer) override {
    run({{buf, bytes}}, [&](Mirror& m) { staged_->send(m.map(buf), bytes, peer); });
  }
  void recv(void* buf, size_t bytes, int peer) override {
    run({{buf, bytes}}, [&](Mirror& m) { staged_->recv(m.map(buf), bytes, peer); });
  }
  void barrier() override { staged_->barrier(); }
  void abort() noexcept override {
    if (staged_) staged_->abort();
  }

 private:
  template <typename F>
  void run(std::initializer_list<std::pair<const void*, size_t>> bufs, F&& call) {
    Mirror m(*dev_);
    for (auto& b : bufs) m.add(b.first, b.second);
    m.upload();
    try {
      call(m);
    } catch (...) {
      m.download();
      throw;
    }
    m.download();
  }

  std::unique_ptr<FakeDevice> dev_;
  std::unique_ptr<StagedCommunicator> staged_;
};

}  // namespace stagedtest
