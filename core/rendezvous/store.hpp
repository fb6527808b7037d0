// A key-value store shared by all ranks of a job, used only to bootstrap:
// ranks publish their host and addresses, agree on shared-memory names,
// exchange gloo/NCCL connection data. Like torch's TCPStore and gloo's Store.
// All methods are thread-safe and throw oslo::Error; blocking methods give up
// with OSLO_ERR_TIMEOUT at the deadline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/deadline.hpp"

namespace oslo {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Blocks until key exists.
  virtual std::vector<uint8_t> get(const std::string& key, const Deadline& deadline) = 0;
  // Atomically adds delta to the integer stored at key (0 if missing); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // True if every key exists (does not block).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Blocks until every key exists; on timeout the error names the missing keys.
  virtual void wait(const std::vector<std::string>& keys, const Deadline& deadline) = 0;
};

}  // namespace oslo
