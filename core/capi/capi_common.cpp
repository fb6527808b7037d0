// Status strings, the thread-local last error, version.
#include "core/capi/handles.hpp"

namespace oslo {
namespace capi {
namespace {
thread_local std::string last_error;
}
const char* last_error_cstr() noexcept {
  return last_error.c_str();
}
void set_last_error(const std::string& msg) noexcept {
  try {
    last_error = msg;
  } catch (...) {
    // Keep whatever was there; the status still reports the failure.
  }
}
}  // namespace capi
}  // namespace oslo

extern "C" {

const char* oslo_status_string(oslo_status status) {
  switch (status) {
    case OSLO_OK: return "OSLO_OK: success";
    case OSLO_ERR_INVALID_ARGUMENT: return "OSLO_ERR_INVALID_ARGUMENT: invalid argument";
    case OSLO_ERR_OUT_OF_MEMORY: return "OSLO_ERR_OUT_OF_MEMORY: out of memory";
    case OSLO_ERR_BACKEND_UNAVAILABLE: return "OSLO_ERR_BACKEND_UNAVAILABLE: backend unavailable";
    case OSLO_ERR_COMM: return "OSLO_ERR_COMM: communication error";
    case OSLO_ERR_TIMEOUT: return "OSLO_ERR_TIMEOUT: timed out";
    case OSLO_ERR_IO: return "OSLO_ERR_IO: I/O error";
    case OSLO_ERR_FORMAT: return "OSLO_ERR_FORMAT: invalid format";
    case OSLO_ERR_SHAPE: return "OSLO_ERR_SHAPE: shape mismatch";
    case OSLO_ERR_DTYPE: return "OSLO_ERR_DTYPE: unsupported dtype";
    case OSLO_ERR_CONFIG: return "OSLO_ERR_CONFIG: invalid configuration";
    case OSLO_ERR_NOT_SUPPORTED: return "OSLO_ERR_NOT_SUPPORTED: not supported";
    case OSLO_ERR_INTERNAL: return "OSLO_ERR_INTERNAL: internal error";
    case OSLO_STATUS_COUNT: break;
    default: break;
  }
  return "unknown status";
}

const char* oslo_last_error(void) {
  return oslo::capi::last_error_cstr();
}

void oslo_clear_error(void) {
  oslo::capi::set_last_error("");
}

void oslo_version(int* major, int* minor, int* patch) {
  if (major) *major = OSLO_VERSION_MAJOR;
  if (minor) *minor = OSLO_VERSION_MINOR;
  if (patch) *patch = OSLO_VERSION_PATCH;
}

const char* oslo_version_string(void) {
  return OSLO_VERSION_STRING;
}

}  // extern "C"
