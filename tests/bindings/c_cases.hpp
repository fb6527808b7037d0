// Shared by the C column of the cases every binding repeats
// (tests/bindings/cases.txt): c_cases.cpp, c_engine_cases.cpp and
// c_chat_cases.cpp. Test
// scaffolding only (failures as exceptions, owning handles, ranks as
// threads or oslo-run processes); every oslo call is a plain C call.
#pragma once

#include <oslo.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cases {

namespace fs = std::filesystem;
using nlohmann::json;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check(bool cond, const std::string& what) {
  if (!cond) throw Failure(what);
}

// Every oslo call goes through ok(): a failure carries the call, the status
// name and the thread-local message.
inline void ok(oslo_status st, const char* call) {
  if (st != OSLO_OK)
    throw Failure(std::string(call) + ": " + oslo_status_string(st) + ": " + oslo_last_error());
}
#define OK(call) ::cases::ok((call), #call)

// Expects `st` to be the error `want`, with a message containing `needle`.
inline void expect_error(oslo_status st, oslo_status want, const std::string& needle,
                         const std::string& what) {
  const std::string msg = oslo_last_error();
  check(st == want, what + ": got " + oslo_status_string(st) + " (" + msg + "), want " +
                        oslo_status_string(want));
  check(msg.find(needle) != std::string::npos,
        what + ": message '" + msg + "' does not name '" + needle + "'");
}

// Owning wrappers, so a failed check never leaks a handle.
struct ContextDel {
  void operator()(oslo_context* c) const { oslo_context_destroy(c); }
};
struct TensorDel {
  void operator()(oslo_tensor* t) const { oslo_tensor_destroy(t); }
};
struct LinearDel {
  void operator()(oslo_parallel_linear* l) const { oslo_parallel_linear_destroy(l); }
};
struct SetDel {
  void operator()(oslo_param_set* s) const { oslo_param_set_destroy(s); }
};
struct ModelDel {
  void operator()(oslo_model* m) const { oslo_model_destroy(m); }
};
struct TokDel {
  void operator()(oslo_tokenizer* t) const { oslo_tokenizer_destroy(t); }
};
using Context = std::unique_ptr<oslo_context, ContextDel>;
using Tensor = std::unique_ptr<oslo_tensor, TensorDel>;
using Linear = std::unique_ptr<oslo_parallel_linear, LinearDel>;
using ParamSet = std::unique_ptr<oslo_param_set, SetDel>;
struct OptDel {
  void operator()(oslo_optimizer* o) const { oslo_optimizer_destroy(o); }
};
using Model = std::unique_ptr<oslo_model, ModelDel>;
using Optimizer = std::unique_ptr<oslo_optimizer, OptDel>;
using Tokenizer = std::unique_ptr<oslo_tokenizer, TokDel>;

inline Context make_context(const std::string& config) {
  oslo_context* c = nullptr;
  OK(oslo_context_create(config.c_str(), &c));
  return Context(c);
}

inline Tensor make_tensor(oslo_context* ctx, const std::vector<int64_t>& shape,
                          const std::vector<float>& values = {}) {
  oslo_tensor* t = nullptr;
  OK(oslo_tensor_create(ctx, OSLO_DTYPE_F32, static_cast<int>(shape.size()), shape.data(), &t));
  Tensor out(t);
  if (!values.empty())
    OK(oslo_tensor_copy_from_host(t, values.data(), values.size() * sizeof(float)));
  return out;
}

inline std::vector<float> to_host(const oslo_tensor* t) {
  int64_t n = 0;
  OK(oslo_tensor_numel(t, &n));
  std::vector<float> v(static_cast<size_t>(n));
  OK(oslo_tensor_copy_to_host(t, v.data(), v.size() * sizeof(float)));
  return v;
}

inline int rank_of(oslo_context* ctx, oslo_group g = OSLO_GROUP_WORLD) {
  int r = -1;
  OK(oslo_context_rank(ctx, g, &r));
  return r;
}

inline int size_of(oslo_context* ctx, oslo_group g = OSLO_GROUP_WORLD) {
  int n = -1;
  OK(oslo_context_size(ctx, g, &n));
  return n;
}

inline std::string temp_dir(const char* what) {
  std::string tmpl = (fs::temp_directory_path() / (std::string("oslo-c-") + what + "-XXXXXX"));
  if (!mkdtemp(tmpl.data())) throw Failure("mkdtemp failed");
  return tmpl;
}

// A config for a rank of its own world of one (its own file:// store).
inline std::string solo_config() {
  return R"({"rank": 0, "world_size": 1, "timeout_seconds": 120, "init_method": "file://)" +
         temp_dir("solo") + "/store\"}";
}

// Runs body(config) on every rank: `threads` threads of this process with a
// file:// rendezvous, or (threads == 0) once with oslo-run's environment.
inline void run_ranks(const std::function<void(const std::string&)>& body, int threads) {
  if (threads == 0) {
    const char* w = std::getenv("WORLD_SIZE");
    body(std::string(R"({"timeout_seconds": 120, "tensor_parallel_size": )") + (w ? w : "1") + "}");
    return;
  }
  const std::string store = temp_dir("ranks") + "/store";
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> ts;
  for (int r = 0; r < threads; ++r)
    ts.emplace_back([&, r] {
      std::ostringstream cfg;
      cfg << R"({"rank": )" << r << R"(, "world_size": )" << threads
          << R"(, "tensor_parallel_size": )" << threads
          << R"(, "timeout_seconds": 120, "init_method": "file://)" << store << "\"}";
      try {
        body(cfg.str());
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back("[thread rank " + std::to_string(r) + "] " + e.what());
      }
    });
  for (auto& t : ts) t.join();
  if (!errors.empty()) {
    std::string all;
    for (const auto& e : errors) all += e + "\n";
    throw Failure(all);
  }
}

inline int world_of(int threads) {
  if (threads) return threads;
  const char* w = std::getenv("WORLD_SIZE");
  return w ? std::atoi(w) : 1;
}

inline Model load_model(oslo_context* ctx, const std::string& dir) {
  oslo_model* m = nullptr;
  OK(oslo_model_load(ctx, dir.c_str(), nullptr, &m));
  return Model(m);
}

// The engine cases (c_engine_cases.cpp); threads: 0 under oslo-run, else
// the number of rank threads.
void engine_stream_gpt2(int threads, const std::string& fixture);
void engine_cancel_and_errors(int threads, const std::string& fixture);
void engine_tp2(int threads, const std::string& fixture);

// The chat template cases (c_chat_cases.cpp): the records of case `which`
// (folder, options, errors) of chat_template_reference.txt; template_dir is
// tests/template (its folders/ and fixtures/).
void chat_template_case(const std::string& which, const std::string& reference,
                        const std::string& template_dir);

}  // namespace cases
