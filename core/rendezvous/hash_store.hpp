// An in-process Store (mutex + condition variable). Used by tests whose ranks
// are threads that share one store object; the context itself always uses a
// TCP or file store.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "core/common/error.hpp"
#include "core/rendezvous/store.hpp"

namespace oslo {

class HashStore : public Store {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    std::lock_guard<std::mutex> lk(mu_);
    data_[key] = value;
    cv_.notify_all();
  }
  std::vector<uint8_t> get(const std::string& key, const Deadline& deadline) override {
    wait({key}, deadline);
    std::lock_guard<std::mutex> lk(mu_);
    return data_.at(key);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lk(mu_);
    int64_t v = 0;
    auto it = data_.find(key);
    if (it != data_.end()) v = std::stoll(std::string(it->second.begin(), it->second.end()));
    v += delta;
    std::string s = std::to_string(v);
    data_[key] = std::vector<uint8_t>(s.begin(), s.end());
    cv_.notify_all();
    return v;
  }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& k : keys)
      if (!data_.count(k)) return false;
    return true;
  }
  void wait(const std::vector<std::string>& keys, const Deadline& deadline) override {
    std::unique_lock<std::mutex> lk(mu_);
    auto ready = [&] {
      for (const auto& k : keys)
        if (!data_.count(k)) return false;
      return true;
    };
    if (!cv_.wait_until(lk, deadline.time_point(), ready)) {
      std::string missing;
      for (const auto& k : keys)
        if (!data_.count(k)) missing += (missing.empty() ? "" : ", ") + k;
      fail(OSLO_ERR_TIMEOUT, "store: timed out waiting for keys: ", missing);
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<uint8_t>> data_;
};

}  // namespace oslo
