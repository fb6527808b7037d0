// File-system helpers of the checkpoint module: atomic replacement of a file
// (temporary, fsync, rename, fsync of the directory), mkdir -p, directory
// listing, and fault-injection points for crash tests. Every failure throws
// oslo::Error(OSLO_ERR_IO) naming the path and the errno text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace oslo {
namespace fsutil {

std::string errno_text(int err);

// The directory part of a path ("." if it has none).
std::string parent_dir(const std::string& path);
// The last component of a path.
std::string base_name(const std::string& path);
// a + "/" + b.
std::string join(const std::string& a, const std::string& b);

// Writes n bytes to fd (retrying short writes and EINTR); `what` names the
// file in errors.
void write_all(int fd, const void* data, size_t n, const std::string& what);
// Reads exactly n bytes at offset with pread; returns the number read, which
// is less than n only at end of file.
size_t pread_full(int fd, void* data, size_t n, uint64_t offset, const std::string& what);

// fsync of a directory, so that a rename or unlink in it is durable.
void fsync_dir(const std::string& dir);
// mkdir -p; newly created directories are made durable in their parents.
void make_dirs(const std::string& dir);
// Names of the entries of a directory (without "." and "..").
std::vector<std::string> list_dir(const std::string& dir);
// Reads a whole (small) file; OSLO_ERR_IO if it is larger than max_bytes.
std::string read_small_file(const std::string& path, size_t max_bytes);
// True if a directory entry of that name exists (any type).
bool exists(const std::string& path);

// 64 random bits from the operating system.
uint64_t random_u64();
// `<path>.tmp.<pid>.<16 hex digits>`.
std::string temp_name(const std::string& path);
// True if `name` looks like a temporary made by temp_name for `base`.
bool is_temp_of(const std::string& name, const std::string& base);

// Replaces `path` atomically with what `body` writes to the descriptor it is
// given: the data goes to temp_name(path), which is fsync'ed, closed and
// renamed over `path`; then the directory is fsync'ed. If anything fails
// (including body throwing), the temporary is removed, `path` is untouched,
// and the error is rethrown.
void write_atomically(const std::string& path, const std::function<void(int fd)>& body);

// Fault injection for crash tests. Production code calls fault_point at the
// named steps of a save; a test installs a hook that throws or _exit()s
// there. No hook is installed by default, which makes fault_point a no-op.
using FaultHook = void (*)(const char* point, const std::string& path);
void set_fault_hook(FaultHook hook);
void fault_point(const char* point, const std::string& path);

}  // namespace fsutil
}  // namespace oslo
