#include "core/checkpoint/fs_util.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/common/error.hpp"

namespace oslo {
namespace fsutil {

namespace {

std::atomic<FaultHook> g_fault_hook{nullptr};

// Closes a descriptor when it goes out of scope.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }
  // Closes now and reports the error (close can report a deferred write error).
  int close_now() {
    int fd = fd_;
    fd_ = -1;
    return ::close(fd);
  }

 private:
  int fd_;
};

}  // namespace

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns a char* that may or may not point into buf.
  const char* s = strerror_r(err, buf, sizeof buf);
  return s ? std::string(s) : std::string("errno ") + std::to_string(err);
}

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

void write_all(int fd, const void* data, size_t n, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t chunk = n < (size_t{1} << 30) ? n : (size_t{1} << 30);
    ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      fail(OSLO_ERR_IO, "cannot write ", quote_path(what), ": ", errno_text(e));
    }
    if (w == 0) fail(OSLO_ERR_IO, "cannot write ", quote_path(what), ": write returned 0");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

size_t pread_full(int fd, void* data, size_t n, uint64_t offset, const std::string& what) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < n) {
    size_t chunk = n - done < (size_t{1} << 30) ? n - done : (size_t{1} << 30);
    ssize_t r = ::pread(fd, p + done, chunk, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      fail(OSLO_ERR_IO, "cannot read ", quote_path(what), ": ", errno_text(e));
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    fail(OSLO_ERR_IO, "cannot open directory ", quote_path(dir), ": ", errno_text(e));
  }
  FdGuard guard(fd);
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    int e = errno;
    fail(OSLO_ERR_IO, "cannot fsync directory ", quote_path(dir), ": ", errno_text(e));
  }
}

void make_dirs(const std::string& dir) {
  OSLO_CHECK(!dir.empty(), OSLO_ERR_INVALID_ARGUMENT, "checkpoint directory is empty");
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    OSLO_CHECK(S_ISDIR(st.st_mode), OSLO_ERR_IO, quote_path(dir), " exists and is not a directory");
    return;
  }
  if (errno != ENOENT) {
    int e = errno;
    fail(OSLO_ERR_IO, "cannot access ", quote_path(dir), ": ", errno_text(e));
  }
  std::string parent = parent_dir(dir);
  if (parent != dir) make_dirs(parent);
  if (::mkdir(dir.c_str(), 0777) != 0) {
    int e = errno;
    if (e == EEXIST && ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;  // a peer won
    fail(OSLO_ERR_IO, "cannot create directory ", quote_path(dir), ": ", errno_text(e));
  }
  fsync_dir(parent);
}

std::vector<std::string> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    int e = errno;
    fail(OSLO_ERR_IO, "cannot list directory ", quote_path(dir), ": ", errno_text(e));
  }
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    struct dirent* ent = ::readdir(d);
    if (!ent) {
      int e = errno;
      ::closedir(d);
      if (e != 0) fail(OSLO_ERR_IO, "cannot list directory ", quote_path(dir), ": ", errno_text(e));
      break;
    }
    std::string name = ent->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  return names;
}

std::string read_small_file(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
  if (fd < 0) {
    int e = errno;
    fail(OSLO_ERR_IO, "cannot open ", quote_path(path), ": ", errno_text(e));
  }
  FdGuard guard(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    fail(OSLO_ERR_IO, "cannot stat ", quote_path(path), ": ", errno_text(e));
  }
  OSLO_CHECK(S_ISREG(st.st_mode), OSLO_ERR_IO, quote_path(path), " is not a regular file");
  OSLO_CHECK(static_cast<uint64_t>(st.st_size) <= max_bytes, OSLO_ERR_IO, quote_path(path), " is ",
             st.st_size, " bytes, more than the limit of ", max_bytes);
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t got = pread_full(fd, &data[0], data.size(), 0, path);
  data.resize(got);
  return data;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

uint64_t random_u64() {
  std::random_device rd;
  uint64_t hi = rd();
  uint64_t lo = rd();
  return (hi << 32) ^ lo;
}

std::string temp_name(const std::string& path) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(random_u64()));
  return path + ".tmp." + std::to_string(::getpid()) + "." + buf;
}

bool is_temp_of(const std::string& name, const std::string& base) {
  const std::string prefix = base + ".tmp.";
  return name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0;
}

void write_atomically(const std::string& path, const std::function<void(int fd)>& body) {
  const std::string tmp = temp_name(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    fail(OSLO_ERR_IO, "cannot create ", quote_path(tmp), ": ", errno_text(e));
  }
  FdGuard guard(fd);
  try {
    body(fd);
    if (::fsync(fd) != 0) {
      int e = errno;
      fail(OSLO_ERR_IO, "cannot fsync ", quote_path(tmp), ": ", errno_text(e));
    }
    if (guard.close_now() != 0) {
      int e = errno;
      fail(OSLO_ERR_IO, "cannot close ", quote_path(tmp), ": ", errno_text(e));
    }
    fault_point("atomic.before_rename", path);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      int e = errno;
      fail(OSLO_ERR_IO, "cannot rename ", quote_path(tmp), " to ", quote_path(path), ": ",
           errno_text(e));
    }
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fault_point("atomic.after_rename", path);
  fsync_dir(parent_dir(path));
}

void set_fault_hook(FaultHook hook) {
  g_fault_hook.store(hook);
}

void fault_point(const char* point, const std::string& path) {
  FaultHook hook = g_fault_hook.load(std::memory_order_relaxed);
  if (hook) hook(point, path);
}

}  // namespace fsutil
}  // namespace oslo
