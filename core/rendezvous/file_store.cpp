#include "core/rendezvous/file_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/common/error.hpp"
#include "core/rendezvous/store_util.hpp"

namespace oslo {

using store_detail::errno_string;
using store_detail::get_u64;
using store_detail::put_u64;

namespace {

// The file starts with this, so that pointing init_method at some unrelated
// file fails loudly instead of parsing garbage as records.
constexpr char kMagic[8] = {'O', 'S', 'L', 'O', 'F', 'S', '0', '1'};
constexpr uint64_t kHeaderSize = sizeof kMagic;
// A record is u64 key length, u64 value length, key, value. The limits only
// catch corruption early; real keys are short and values at most a few MB.
constexpr uint64_t kRecordHeader = 16;
constexpr uint64_t kMaxKey = 1u << 20;
constexpr uint64_t kMaxValue = uint64_t(1) << 40;

void pwrite_all(int fd, const uint8_t* p, size_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(OSLO_ERR_IO, "file store: cannot write '", path, "': ", errno_string(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
    off += static_cast<uint64_t>(w);
  }
}

// Reads exactly n bytes unless the file ends first; returns the bytes read.
size_t pread_all(int fd, uint8_t* p, size_t n, uint64_t off, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(OSLO_ERR_IO, "file store: cannot read '", path, "': ", errno_string(errno));
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

uint64_t file_size(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0)
    fail(OSLO_ERR_IO, "file store: cannot stat '", path, "': ", errno_string(errno));
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

FileStore::FileStore(const std::string& path) : path_(path) {
  OSLO_CHECK(!path.empty(), OSLO_ERR_INVALID_ARGUMENT, "file store: empty path");
  std::lock_guard<std::mutex> lk(mu_);
  open_file();
}

FileStore::~FileStore() {
  if (fd_ >= 0) ::close(fd_);
}

void FileStore::open_file() {
  int fd;
  do {
    fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(OSLO_ERR_IO, "file store: cannot open '", path_, "': ", errno_string(errno));
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  pid_ = ::getpid();

  // The first process to get here writes the header. Under the exclusive lock
  // so that two ranks creating the file at once do not both write it, and so
  // that a header torn by a crash of its writer is redone rather than fatal.
  lock_file(Lock::Exclusive);
  try {
    uint64_t size = file_size(fd_, path_);
    uint8_t head[kHeaderSize] = {};
    size_t got = pread_all(fd_, head, kHeaderSize, 0, path_);
    bool prefix_ok = std::memcmp(head, kMagic, got) == 0;
    if (!prefix_ok)
      fail(OSLO_ERR_FORMAT, "file store: '", path_,
           "' exists and is not an oslo store file (delete it or pick another path)");
    if (size < kHeaderSize) {
      if (::ftruncate(fd_, 0) != 0)
        fail(OSLO_ERR_IO, "file store: cannot truncate '", path_, "': ", errno_string(errno));
      pwrite_all(fd_, reinterpret_cast<const uint8_t*>(kMagic), kHeaderSize, 0, path_);
    }
    // A file that shrank below what we had parsed is a different store (the
    // path was removed and recreated); start over on it.
    if (offset_ < kHeaderSize || file_size(fd_, path_) < offset_) {
      offset_ = kHeaderSize;
      cache_.clear();
    }
  } catch (...) {
    unlock_file();
    throw;
  }
  unlock_file();
}

void FileStore::ensure_open() {
  if (::getpid() != pid_) open_file();
}

void FileStore::lock_file(Lock mode) {
  int op = mode == Lock::Exclusive ? LOCK_EX : LOCK_SH;
  while (::flock(fd_, op) != 0) {
    if (errno == EINTR) continue;
    fail(OSLO_ERR_IO, "file store: cannot lock '", path_, "': ", errno_string(errno));
  }
}

void FileStore::unlock_file() {
  // Unlock only fails for a bad fd, which would be a bug; nothing to do then.
  while (::flock(fd_, LOCK_UN) != 0 && errno == EINTR) {
  }
}

bool FileStore::file_changed() {
  return file_size(fd_, path_) != offset_;
}

void FileStore::read_new_records() {
  uint64_t size = file_size(fd_, path_);
  if (size < offset_)
    fail(OSLO_ERR_FORMAT, "file store: '", path_,
         "' shrank while in use (was it deleted and recreated by another job?)");
  if (size == offset_) return;
  std::vector<uint8_t> buf(size - offset_);
  size_t got = pread_all(fd_, buf.data(), buf.size(), offset_, path_);
  size_t pos = 0;
  while (got - pos >= kRecordHeader) {
    uint64_t klen = get_u64(&buf[pos]);
    uint64_t vlen = get_u64(&buf[pos + 8]);
    if (klen > kMaxKey || vlen > kMaxValue)
      fail(OSLO_ERR_FORMAT, "file store: '", path_, "' has a corrupt record at offset ",
           offset_ + pos);
    // A record still short of its end was torn by a writer that died: the
    // lock guarantees no writer is active now. Stop there; the next writer
    // cuts it off.
    if (got - pos - kRecordHeader < klen + vlen) break;
    const uint8_t* k = &buf[pos + kRecordHeader];
    const uint8_t* v = k + klen;
    cache_[std::string(reinterpret_cast<const char*>(k), klen)] = std::vector<uint8_t>(v, v + vlen);
    pos += kRecordHeader + klen + vlen;
  }
  offset_ += pos;
}

void FileStore::append_record(const std::string& key, const std::vector<uint8_t>& value) {
  // Called with the exclusive lock after read_new_records(), so anything past
  // offset_ is the torn tail of a crashed writer.
  if (file_size(fd_, path_) > offset_ && ::ftruncate(fd_, static_cast<off_t>(offset_)) != 0)
    fail(OSLO_ERR_IO, "file store: cannot truncate '", path_, "': ", errno_string(errno));
  std::vector<uint8_t> rec;
  rec.reserve(kRecordHeader + key.size() + value.size());
  put_u64(rec, key.size());
  put_u64(rec, value.size());
  rec.insert(rec.end(), key.begin(), key.end());
  rec.insert(rec.end(), value.begin(), value.end());
  try {
    pwrite_all(fd_, rec.data(), rec.size(), offset_, path_);
  } catch (...) {
    // Leave no half record behind (e.g. on ENOSPC); best effort.
    if (::ftruncate(fd_, static_cast<off_t>(offset_)) != 0) {
    }
    throw;
  }
  offset_ += rec.size();
  cache_[key] = value;
}

bool FileStore::has_all(const std::vector<std::string>& keys) const {
  for (const auto& k : keys)
    if (!cache_.count(k)) return false;
  return true;
}

void FileStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  std::lock_guard<std::mutex> lk(mu_);
  ensure_open();
  lock_file(Lock::Exclusive);
  try {
    read_new_records();
    append_record(key, value);
  } catch (...) {
    unlock_file();
    throw;
  }
  unlock_file();
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lk(mu_);
  ensure_open();
  lock_file(Lock::Exclusive);
  int64_t v = 0;
  try {
    read_new_records();
    auto it = cache_.find(key);
    if (it != cache_.end()) v = store_detail::parse_counter(key, it->second);
    // Wrap like two's complement instead of signed-overflow UB.
    v = static_cast<int64_t>(static_cast<uint64_t>(v) + static_cast<uint64_t>(delta));
    append_record(key, store_detail::counter_bytes(v));
  } catch (...) {
    unlock_file();
    throw;
  }
  unlock_file();
  return v;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lk(mu_);
  ensure_open();
  if (has_all(keys)) return true;
  lock_file(Lock::Shared);
  try {
    read_new_records();
  } catch (...) {
    unlock_file();
    throw;
  }
  unlock_file();
  return has_all(keys);
}

void FileStore::wait(const std::vector<std::string>& keys, const Deadline& deadline) {
  auto start = std::chrono::steady_clock::now();
  // Short sleeps first so that a rendezvous whose peers are already there is
  // quick, then up to 10 ms so that many waiting ranks do not hammer a shared
  // file system.
  auto nap = std::chrono::milliseconds(1);
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      ensure_open();
      if (has_all(keys)) return;
      // The size check is a cheap hint that avoids taking the lock when
      // nothing was appended; the real read happens under the lock.
      if (file_changed()) {
        lock_file(Lock::Shared);
        try {
          read_new_records();
        } catch (...) {
          unlock_file();
          throw;
        }
        unlock_file();
        if (has_all(keys)) return;
      }
      if (deadline.expired()) {
        std::vector<std::string> missing;
        for (const auto& k : keys)
          if (!cache_.count(k)) missing.push_back(k);
        double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        fail(OSLO_ERR_TIMEOUT, "file store: timed out after ", store_detail::seconds_text(waited),
             " s waiting for keys: ", store_detail::join_keys(missing), " (store file '", path_,
             "')");
      }
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.time_point() -
                                                                      Deadline::Clock::now());
    std::this_thread::sleep_for(std::max(std::chrono::milliseconds(0), std::min(nap, left)));
    nap = std::min(nap * 2, std::chrono::milliseconds(10));
  }
}

std::vector<uint8_t> FileStore::get(const std::string& key, const Deadline& deadline) {
  wait({key}, deadline);
  std::lock_guard<std::mutex> lk(mu_);
  return cache_.at(key);
}

void FileStore::remove(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    fail(OSLO_ERR_IO, "file store: cannot remove '", path, "': ", errno_string(errno));
}

}  // namespace oslo
