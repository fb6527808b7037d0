// A Store kept in one file on a file system that every rank can see
// (init_method "file:///path"). The file is an append-only log of
// (key, value) records; every rank keeps a cache of what it has read and reads
// only what was appended since. Writers hold an exclusive flock(2) and readers
// a shared one, so processes on one host or on a shared file system with
// working flock (local fs, NFSv4, Lustre with flock) see whole records only.
// Within a process a mutex serialises the threads using one FileStore.
//
// Stale files: records are never removed, so a file left by an earlier job
// would hand its keys (old addresses, old counters) to the new job. The file
// must not exist when a job starts. The context's rank 0 calls
// FileStore::remove() once every rank has joined; if a job dies before that,
// the user has to delete the file. A FileStore opened on a file that is not an
// oslo store (wrong header) fails with OSLO_ERR_FORMAT instead of guessing.
//
// fork(): a FileStore notices that it now lives in a child process and opens
// the file again, because flock locks belong to the open file description,
// which parent and child would otherwise share (and so not exclude each other).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/rendezvous/store.hpp"

namespace oslo {

class FileStore : public Store {
 public:
  // Opens (creating if missing) the store file. Throws OSLO_ERR_IO when the
  // file cannot be opened or created, OSLO_ERR_FORMAT when it is not a store.
  explicit FileStore(const std::string& path);
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, const Deadline& deadline) override;
  // The value is kept as decimal text, like HashStore, so get() of a counter
  // reads "3".
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const Deadline& deadline) override;

  const std::string& path() const { return path_; }

  // Deletes the store file; a missing file is not an error. Ranks that still
  // have it open keep working on the unlinked file, ranks that open the path
  // afterwards get a fresh, empty store. Throws OSLO_ERR_IO on other errors.
  static void remove(const std::string& path);

 private:
  enum class Lock { Shared, Exclusive };
  void open_file();
  void ensure_open();  // reopens after fork()
  void lock_file(Lock mode);
  void unlock_file();
  // Reads records appended since the last call. Requires mu_ and the flock.
  void read_new_records();
  void append_record(const std::string& key, const std::vector<uint8_t>& value);
  bool has_all(const std::vector<std::string>& keys) const;
  bool file_changed();

  const std::string path_;
  std::mutex mu_;
  int fd_ = -1;
  pid_t pid_ = 0;
  uint64_t offset_ = 0;  // bytes of the file already parsed into cache_
  std::unordered_map<std::string, std::vector<uint8_t>> cache_;
};

}  // namespace oslo
