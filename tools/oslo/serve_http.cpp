// `oslo serve`'s HTTP side (serve_http.hpp). One cpp-httplib server, one
// thread per connection from its pool; each generation request adds its
// prompts to the engine and reads their output with oslo_engine_next on
// that connection's thread, while one thread of ours steps the engine
// (oslo_engine_run). A connection that breaks (a write fails, or a
// keep-alive written while waiting fails) cancels its requests.
#include "tools/oslo/serve_http.hpp"

#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace oslo_cli {
namespace serve {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// How long a reader waits for output before it writes a keep-alive (which
// is how a client that went away is noticed while nothing is produced).
constexpr int64_t kPollMs = 1000;
// How long a non-streaming request is answered with a plain response
// (its status still free to be an error) before the body starts with
// keep-alive whitespace.
constexpr int64_t kPlainWaitMs = 1000;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Prometheus histogram of seconds.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v) {
    std::lock_guard<std::mutex> l(mu_);
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++n_;
  }
  void write(std::ostringstream& o, const char* name, const char* help) const {
    std::lock_guard<std::mutex> l(mu_);
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    uint64_t acc = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
      acc += counts_[i];
      o << name << "_bucket{le=\"" << bounds_[i] << "\"} " << acc << "\n";
    }
    o << name << "_bucket{le=\"+Inf\"} " << n_ << "\n"
      << name << "_sum " << sum_ << "\n"
      << name << "_count " << n_ << "\n";
  }

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t n_ = 0;
};

// What one reader got from the engine for one request.
struct Piece {
  std::string text;
  size_t tokens = 0;
  oslo_finish_reason finish = OSLO_FINISH_NONE;
  bool timed_out = false;  // nothing within the wait
};

class HttpServer {
 public:
  HttpServer(oslo_engine* e, const Served& s, const HttpConfig& c)
      : engine_(e), served_(s), cfg_(c), started_(unix_now()) {}
  int run();

 private:
  // Generation: the request's engine ids and what came back so far.
  struct Job {
    GenRequest req;
    std::string id;
    int64_t created = 0;
    std::vector<int64_t> rids;
    std::vector<bool> done;
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    Clock::time_point t0 = Clock::now();
    bool first_seen = false;
  };

  void routes();
  void check_auth(const httplib::Request& req) const;
  void generate(Endpoint ep, const httplib::Request& req, httplib::Response& res);
  std::shared_ptr<Job> add(Endpoint ep, const httplib::Request& req);
  Piece read(Job& job, size_t i, int64_t wait_ms);
  void forget(Job& job);
  void stream(const std::shared_ptr<Job>& job, httplib::Response& res);
  void plain(const std::shared_ptr<Job>& job, httplib::Response& res);
  std::string metrics();
  void error(httplib::Response& res, const ApiError& e);
  void count_finish(oslo_finish_reason f);
  void run_engine();
  void sample();
  void wait_signal();

  oslo_engine* engine_;
  Served served_;
  HttpConfig cfg_;
  int64_t started_;
  httplib::Server svr_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> failed_{false};
  std::mutex fail_mu_;
  std::string failure_;
  // Metrics.
  std::atomic<uint64_t> finished_[6] = {};  // by oslo_finish_reason
  std::mutex err_mu_;
  std::map<int, uint64_t> http_errors_;
  Histogram ttft_{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram e2e_{{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
  std::mutex rate_mu_;
  std::deque<std::pair<Clock::time_point, int64_t>> samples_;  // generated tokens over time
};

void HttpServer::error(httplib::Response& res, const ApiError& e) {
  res.status = e.http;
  res.set_content(dump(e.body()), "application/json");
  std::lock_guard<std::mutex> l(err_mu_);
  ++http_errors_[e.http];
}

void HttpServer::count_finish(oslo_finish_reason f) {
  if (f >= 0 && f < 6) ++finished_[f];
}

void HttpServer::check_auth(const httplib::Request& req) const {
  if (cfg_.api_key.empty()) return;
  if (req.get_header_value("Authorization") != "Bearer " + cfg_.api_key)
    throw ApiError(401, "Incorrect API key provided", "", "invalid_api_key",
                   "invalid_request_error");
}

std::shared_ptr<HttpServer::Job> HttpServer::add(Endpoint ep, const httplib::Request& req) {
  check_auth(req);
  if (failed_) {
    std::lock_guard<std::mutex> l(fail_mu_);
    throw ApiError(503, "the engine failed: " + failure_, "", "engine_failed");
  }
  if (stopping_) throw ApiError(503, "the server is shutting down", "", "shutting_down");
  auto job = std::make_shared<Job>();
  job->req = parse_request(ep, req.body, served_);
  job->id = new_response_id(ep);
  job->created = unix_now();
  std::vector<const char*> stops;
  for (const auto& s : job->req.stop) stops.push_back(s.c_str());
  for (size_t i = 0; i < job->req.prompts.size(); ++i) {
    oslo_generate_options o = job->req.options;
    if (job->req.seeded)
      o.seed += i;
    else if (o.do_sample)
      o.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    const auto& ids = job->req.prompts[i].ids;
    int64_t rid = 0;
    const oslo_status st =
        oslo_engine_add(engine_, ids.data(), ids.size(), &o, stops.data(), stops.size(), &rid);
    if (st != OSLO_OK) {
      const std::string msg = oslo_last_error();
      forget(*job);
      if (st == OSLO_ERR_INVALID_ARGUMENT && !stopping_ && !failed_)
        throw ApiError(400, msg, ep == Endpoint::kChat ? "messages" : "prompt");
      throw ApiError(503, std::string("the engine refused the request: ") + msg);
    }
    job->rids.push_back(rid);
    job->done.push_back(false);
    job->prompt_tokens += static_cast<int64_t>(ids.size());
  }
  return job;
}

Piece HttpServer::read(Job& job, size_t i, int64_t wait_ms) {
  Piece p;
  std::array<int64_t, 256> toks;
  std::vector<char> text(1 << 14);
  size_t nt = 0, tl = 0;
  const oslo_status st = oslo_engine_next(engine_, job.rids[i], wait_ms, toks.data(), toks.size(),
                                          &nt, text.data(), text.size(), &tl, &p.finish);
  if (st == OSLO_ERR_TIMEOUT) {
    p.timed_out = true;
    return p;
  }
  if (st != OSLO_OK) {
    // The request failed (its finish is ERROR): a rank, the model.
    const std::string msg = oslo_last_error();
    job.done[i] = true;
    count_finish(OSLO_FINISH_ERROR);
    throw ApiError(500, std::string("generation failed: ") + oslo_status_string(st) + ": " + msg,
                   "", "engine_error");
  }
  p.text.assign(text.data(), tl);
  p.tokens = nt;
  job.completion_tokens += static_cast<int64_t>(nt);
  if (nt && !job.first_seen) {
    job.first_seen = true;
    ttft_.observe(seconds_since(job.t0));
  }
  if (p.finish != OSLO_FINISH_NONE) {
    job.done[i] = true;
    count_finish(p.finish);
  }
  return p;
}

// Cancels the job's requests still live and reads them to their end, so
// the engine forgets them (a finished request's last output waits for
// its reader).
void HttpServer::forget(Job& job) {
  for (size_t i = 0; i < job.rids.size(); ++i) {
    if (job.done[i]) continue;
    oslo_engine_cancel(engine_, job.rids[i], nullptr);
    std::array<int64_t, 256> toks;
    std::vector<char> text(1 << 14);
    const auto t0 = Clock::now();
    while (seconds_since(t0) < 60) {
      size_t nt = 0, tl = 0;
      oslo_finish_reason f = OSLO_FINISH_NONE;
      const oslo_status st = oslo_engine_next(engine_, job.rids[i], kPollMs, toks.data(),
                                              toks.size(), &nt, text.data(), text.size(), &tl, &f);
      if (st == OSLO_ERR_TIMEOUT) continue;
      if (st != OSLO_OK || f != OSLO_FINISH_NONE) {
        count_finish(st == OSLO_OK ? f : OSLO_FINISH_ERROR);
        break;
      }
    }
    job.done[i] = true;
  }
}

void HttpServer::stream(const std::shared_ptr<Job>& job, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job](size_t, httplib::DataSink& sink) {
        const Job& j = *job;
        auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        auto event = [&](const json& v) { return send("data: " + dump(v) + "\n\n"); };
        // Choices one after the other: all run at once in the engine, and
        // their output waits in its queues.
        for (size_t i = 0; i < j.rids.size(); ++i) {
          bool first = true;
          for (;;) {
            Piece p;
            try {
              p = read(*job, i, kPollMs);
            } catch (const ApiError& e) {
              // Headers are gone: the error is an event, as OpenAI's is.
              event(e.body());
              send("data: [DONE]\n\n");
              sink.done();
              return true;
            }
            if (p.timed_out) {
              if (!send(": keep-alive\n\n")) return false;
              continue;
            }
            if (!p.text.empty() || p.finish != OSLO_FINISH_NONE || first)
              if (!event(chunk(j.req, j.id, j.created, served_.model_name, i, p.text, p.finish,
                               first)))
                return false;
            first = false;
            if (p.finish != OSLO_FINISH_NONE) break;
          }
        }
        if (j.req.include_usage)
          event(usage_chunk(j.req, j.id, j.created, served_.model_name, j.prompt_tokens,
                            j.completion_tokens));
        send("data: [DONE]\n\n");
        e2e_.observe(seconds_since(j.t0));
        sink.done();
        return true;
      },
      // A client gone before the end: its requests are cancelled.
      [this, job](bool) { forget(*job); });
}

void HttpServer::plain(const std::shared_ptr<Job>& job, httplib::Response& res) {
  auto texts = std::make_shared<std::vector<std::string>>(job->rids.size());
  auto finishes =
      std::make_shared<std::vector<oslo_finish_reason>>(job->rids.size(), OSLO_FINISH_NONE);
  size_t at = 0;  // the choice being read
  // Read for up to kPlainWaitMs: most requests are done by then and get a
  // plain response whose status can still say an error.
  const auto t0 = Clock::now();
  auto pump = [&](int64_t wait_ms) {
    while (at < job->rids.size()) {
      Piece p = read(*job, at, wait_ms);
      if (p.timed_out) return false;
      (*texts)[at] += p.text;
      if (p.finish != OSLO_FINISH_NONE) (*finishes)[at++] = p.finish;
    }
    return true;
  };
  auto body = [this, job, texts, finishes]() {
    e2e_.observe(seconds_since(job->t0));
    return dump(response(job->req, job->id, job->created, served_.model_name, *texts, *finishes,
                         job->prompt_tokens, job->completion_tokens));
  };
  try {
    while (seconds_since(t0) * 1000 < kPlainWaitMs)
      if (pump(std::max<int64_t>(1, kPlainWaitMs - int64_t(seconds_since(t0) * 1000)))) {
        res.set_content(body(), "application/json");
        return;
      }
  } catch (const ApiError&) {
    forget(*job);
    throw;
  }
  // Longer: the status is sent now (200) and the body waits, led by
  // whitespace written every kPollMs (JSON allows it) so that a client
  // gone away is noticed and its requests cancelled.
  res.set_chunked_content_provider(
      "application/json",
      [this, job, texts, finishes, at, body](size_t, httplib::DataSink& sink) mutable {
        try {
          while (at < job->rids.size()) {
            Piece p = read(*job, at, kPollMs);
            if (p.timed_out) {
              if (!sink.write(" ", 1)) return false;
              continue;
            }
            (*texts)[at] += p.text;
            if (p.finish != OSLO_FINISH_NONE) (*finishes)[at++] = p.finish;
          }
        } catch (const ApiError& e) {
          const std::string s = dump(e.body());
          sink.write(s.data(), s.size());
          sink.done();
          return true;
        }
        const std::string s = body();
        if (!sink.write(s.data(), s.size())) return false;
        sink.done();
        return true;
      },
      [this, job](bool) { forget(*job); });
}

void HttpServer::generate(Endpoint ep, const httplib::Request& req, httplib::Response& res) {
  try {
    auto job = add(ep, req);
    if (job->req.stream)
      stream(job, res);
    else
      plain(job, res);
  } catch (const ApiError& e) {
    error(res, e);
  }
}

std::string HttpServer::metrics() {
  oslo_engine_stats s{};
  oslo_engine_get_stats(engine_, &s);
  double rate = 0;
  {
    std::lock_guard<std::mutex> l(rate_mu_);
    if (samples_.size() >= 2) {
      const double dt =
          std::chrono::duration<double>(samples_.back().first - samples_.front().first).count();
      if (dt > 0) rate = double(samples_.back().second - samples_.front().second) / dt;
    }
  }
  std::ostringstream o;
  auto one = [&](const char* name, const char* type, const char* help, double v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
      << name << " " << v << "\n";
  };
  one("oslo_requests_running", "gauge", "Requests being computed.", double(s.running));
  one("oslo_requests_waiting", "gauge", "Requests waiting for KV blocks or a place in a step.",
      double(s.waiting));
  one("oslo_kv_blocks_used", "gauge", "KV blocks in use (rank 0).", double(s.blocks_used));
  one("oslo_kv_blocks_total", "gauge", "KV blocks in the pool (rank 0).", double(s.blocks_total));
  one("oslo_kv_cache_usage_ratio", "gauge", "Share of the KV pool in use.",
      s.blocks_total ? double(s.blocks_used) / double(s.blocks_total) : 0.0);
  one("oslo_kv_bytes_used", "gauge", "Bytes of the KV blocks in use (rank 0).",
      double(s.kv_bytes_used));
  one("oslo_cached_tokens", "gauge", "Tokens in the KV cache of running requests.",
      double(s.cached_tokens));
  one("oslo_generation_tokens_per_second", "gauge", "Tokens generated per second, last 10 s.",
      rate);
  one("oslo_engine_steps_total", "counter", "Engine steps that ran the model.", double(s.steps));
  one("oslo_prompt_tokens_total", "counter", "Prompt tokens computed (prefix hits excluded).",
      double(s.prompt_tokens));
  one("oslo_generation_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
  one("oslo_prefix_cache_queries_total", "counter", "Full prompt blocks looked up.",
      double(s.prefix_queries));
  one("oslo_prefix_cache_hits_total", "counter", "Full prompt blocks found (not recomputed).",
      double(s.prefix_hits));
  o << "# HELP oslo_requests_finished_total Requests finished, by reason.\n"
    << "# TYPE oslo_requests_finished_total counter\n";
  const char* reasons[6] = {"none", "length", "eos", "stop", "cancelled", "error"};
  for (int i = 1; i < 6; ++i)
    o << "oslo_requests_finished_total{reason=\"" << reasons[i] << "\"} " << finished_[i].load()
      << "\n";
  o << "# HELP oslo_http_errors_total Error responses, by HTTP status.\n"
    << "# TYPE oslo_http_errors_total counter\n";
  {
    std::lock_guard<std::mutex> l(err_mu_);
    for (const auto& kv : http_errors_)
      o << "oslo_http_errors_total{status=\"" << kv.first << "\"} " << kv.second << "\n";
  }
  ttft_.write(o, "oslo_time_to_first_token_seconds",
              "Time from a request's arrival to its first "
              "token.");
  e2e_.write(o, "oslo_request_seconds", "Time from a request's arrival to its last token.");
  return o.str();
}

void HttpServer::routes() {
  svr_.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) {
    generate(Endpoint::kCompletions, q, r);
  });
  svr_.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) {
    generate(Endpoint::kChat, q, r);
  });
  auto model_card = [this]() {
    return json{{"id", served_.model_name},
                {"object", "model"},
                {"created", started_},
                {"owned_by", "oslo"},
                {"max_model_len", served_.max_positions}};
  };
  svr_.Get("/v1/models", [this, model_card](const httplib::Request& q, httplib::Response& r) {
    try {
      check_auth(q);
      r.set_content(dump(json{{"object", "list"}, {"data", json::array({model_card()})}}),
                    "application/json");
    } catch (const ApiError& e) {
      error(r, e);
    }
  });
  svr_.Get(R"(/v1/models/(.+))",
           [this, model_card](const httplib::Request& q, httplib::Response& r) {
             try {
               check_auth(q);
               if (q.matches[1] != served_.model_name)
                 throw ApiError(404, "The model '" + std::string(q.matches[1]) + "' does not exist",
                                "model", "model_not_found");
               r.set_content(dump(model_card()), "application/json");
             } catch (const ApiError& e) {
               error(r, e);
             }
           });
  svr_.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
    if (failed_) {
      std::lock_guard<std::mutex> l(fail_mu_);
      r.status = 503;
      r.set_content(dump(json{{"status", "failed"}, {"error", failure_}}), "application/json");
    } else if (stopping_) {
      r.status = 503;
      r.set_content(R"({"status":"stopping"})", "application/json");
    } else {
      r.set_content(R"({"status":"ok"})", "application/json");
    }
  });
  svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
    r.set_content(metrics(), "text/plain; version=0.0.4");
  });
  // Unknown routes, wrong methods, bodies over the limit: OpenAI-style
  // errors (a handler's own error body is kept).
  svr_.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request& q, httplib::Response& r) {
        if (!r.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string msg = "no route " + q.method + " " + q.path;
        if (r.status == 413)
          msg = "the body is larger than " + std::to_string(cfg_.max_body) + " bytes";
        else if (r.status != 404)
          msg = q.method + " " + q.path + ": HTTP " + std::to_string(r.status);
        error(r, ApiError(r.status, msg, "", r.status == 404 ? "not_found" : ""));
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr_.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& r, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        error(r, ApiError(500, "internal error: " + what));
      });
  if (cfg_.log_requests)
    svr_.set_logger([](const httplib::Request& q, const httplib::Response& r) {
      std::fprintf(stderr, "oslo serve: %s %s %d\n", q.method.c_str(), q.path.c_str(), r.status);
    });
}

void HttpServer::run_engine() {
  const oslo_status st = oslo_engine_run(engine_);
  if (st != OSLO_OK) {
    {
      std::lock_guard<std::mutex> l(fail_mu_);
      failure_ = std::string(oslo_status_string(st)) + ": " + oslo_last_error();
    }
    failed_ = true;
    std::fprintf(stderr, "oslo serve: the engine failed: %s\n", failure_.c_str());
  }
  svr_.stop();
}

void HttpServer::sample() {
  while (!stopping_ && !failed_) {
    oslo_engine_stats s{};
    oslo_engine_get_stats(engine_, &s);
    {
      std::lock_guard<std::mutex> l(rate_mu_);
      samples_.emplace_back(Clock::now(), s.generated_tokens);
      while (samples_.size() > 11) samples_.pop_front();
    }
    for (int i = 0; i < 10 && !stopping_ && !failed_; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void HttpServer::wait_signal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  const timespec tick{0, 200 * 1000 * 1000};
  while (!failed_ && !stopping_) {
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      std::fprintf(stderr, "oslo serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      stopping_ = true;
      // Requests in flight end ("abort") at the engine's next step, on
      // every rank; oslo_engine_run returns and stops the server.
      oslo_engine_shutdown(engine_);
      return;
    }
  }
}

int HttpServer::run() {
  routes();
  svr_.new_task_queue = [this] { return new httplib::ThreadPool(size_t(cfg_.threads)); };
  svr_.set_payload_max_length(cfg_.max_body);
  svr_.set_read_timeout(cfg_.timeout_s);
  svr_.set_write_timeout(cfg_.timeout_s);
  svr_.set_keep_alive_timeout(5);
  svr_.set_tcp_nodelay(true);
  int port = cfg_.port;
  if (port == 0) {
    port = svr_.bind_to_any_port(cfg_.host);
    if (port < 0) port = 0;
  } else if (!svr_.bind_to_port(cfg_.host, port)) {
    port = 0;
  }
  if (port <= 0) {
    std::fprintf(stderr, "oslo serve: cannot listen on %s:%d\n", cfg_.host.c_str(), cfg_.port);
    oslo_engine_shutdown(engine_);
    return 1;
  }
  std::thread engine_thread([this] { run_engine(); });
  std::thread sampler([this] { sample(); });
  std::thread signals([this] { wait_signal(); });
  std::printf("oslo serve: listening on http://%s:%d\n", cfg_.host.c_str(), port);
  std::fflush(stdout);
  svr_.listen_after_bind();
  // The server stopped: the engine failed or was shut down (or listening
  // failed): make sure every thread ends.
  stopping_ = true;
  oslo_engine_shutdown(engine_);
  engine_thread.join();
  signals.join();
  sampler.join();
  if (failed_) {
    std::lock_guard<std::mutex> l(fail_mu_);
    std::fprintf(stderr, "oslo serve: stopped: the engine failed: %s\n", failure_.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int run_http(oslo_engine* engine, const Served& served, const HttpConfig& cfg) {
  HttpServer s(engine, served, cfg);
  return s.run();
}

}  // namespace serve
}  // namespace oslo_cli
