// The context's configuration, parsed from JSON text or a JSON file with
// nlohmann/json. Strict: unknown keys, wrong types and bad values fail with
// OSLO_ERR_CONFIG naming the key; malformed JSON fails with OSLO_ERR_FORMAT.
#pragma once

#include <cstddef>
#include <string>

namespace oslo {

// Largest config file read (a bigger one fails with OSLO_ERR_IO).
constexpr size_t kMaxConfigFileBytes = size_t(16) << 20;
// Largest accepted "timeout_seconds" (about 116 days); larger values are
// refused with OSLO_ERR_CONFIG rather than overflowing deadline arithmetic.
constexpr double kMaxTimeoutSeconds = 1e7;

struct Config {
  std::string backend = "cpu";
  std::string backend_options = "{}";  // JSON object handed to the backend
  // Which communicators connect the groups (key "communicator"):
  //   "auto"    the backend's own (NCCL for cuda), else oslo's host
  //             transports, staged through host memory when the backend's
  //             memory is not host memory (the default);
  //   "backend" the backend's own, for every group, a group of one
  //             included (NCCL at world 1); a backend without them is
  //             refused;
  //   "host"    oslo's host transports (shm on one host, gloo across hosts),
  //             staged for a device backend: several ranks on one GPU.
  std::string communicator = "auto";
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  int data_parallel_size = -1;  // -1: world / (tp * pp)
  std::string init_method = "env://";
  int rank = -1;  // -1: from the environment
  int world_size = -1;
  int local_rank = -1;
  int local_world_size = -1;
  double timeout_seconds = 300.0;
  int num_threads = -1;  // -1: cores / local_world_size
  // Which weights a loaded model keeps a backend-packed copy of (key
  // "prepack"): "quantized" (block-quantized ones, the default), "all"
  // (float ones too) or "none". OSLO_PREPACK (1: all, 0: none) overrides it.
  std::string prepack = "quantized";

  // `text` is JSON, a path to a JSON file, or empty/NULL for defaults.
  static Config parse(const char* text);
};

// A parsed init_method.
struct InitMethod {
  enum Kind { Env, Tcp, File } kind = Env;
  std::string host;  // Env/Tcp
  int port = 0;      // Env/Tcp
  std::string path;  // File
};

// Parses "env://" (reading MASTER_ADDR, default 127.0.0.1, and MASTER_PORT,
// default 29500), "tcp://host:port", "tcp://[v6addr]:port", "file:///path".
InitMethod parse_init_method(const std::string& s);

}  // namespace oslo
