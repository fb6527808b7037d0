// `oslo serve`'s HTTP side on world rank 0: cpp-httplib's server over an
// engine (include/oslo.h, "Serving engine"), OpenAI's routes
// (serve_openai.hpp), /health and Prometheus /metrics.
#pragma once

#include <cstddef>
#include <string>

#include "oslo.h"
#include "tools/oslo/serve_openai.hpp"

namespace oslo_cli {
namespace serve {

struct HttpConfig {
  std::string host = "127.0.0.1";
  int port = 8000;             // 0: any free port (printed)
  int threads = 64;            // connections served at once
  size_t max_body = 8u << 20;  // bytes; larger bodies get 413
  std::string api_key;         // "": no authentication
  int timeout_s = 60;          // socket read / write timeout (--http-timeout)
  bool log_requests = true;    // one line per request on stderr
};

// Serves `engine` (created on this rank, world rank 0, not yet driven)
// until SIGINT or SIGTERM (then the engine is shut down on every rank:
// requests in flight end with finish_reason "abort") or until the engine
// fails (a rank died: requests in flight get the error, the server
// stops). Drives the engine with oslo_engine_run on a thread of its own.
// Prints "oslo serve: listening on http://HOST:PORT" on stdout once
// clients can connect. Returns the process's exit status: 0 after a
// signal, 1 after a failure (its message on stderr). SIGINT and SIGTERM
// must be blocked in every thread of the process before it is called (it
// waits for them with sigtimedwait), and SIGPIPE ignored (Debian's
// cpp-httplib writes without MSG_NOSIGNAL).
int run_http(oslo_engine* engine, const Served& served, const HttpConfig& cfg);

}  // namespace serve
}  // namespace oslo_cli
