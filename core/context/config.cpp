#include "core/context/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/common/error.hpp"

namespace oslo {
namespace {

using json = nlohmann::json;

// Nesting deeper than this is refused while parsing: the config needs two
// levels, and printing or walking a deeper value recurses (a small stack, as
// rank threads may have, would overflow).
constexpr size_t kMaxDepth = 64;

// A JSON value for a message: its text, clipped.
std::string shown(const json& v) {
  return clip(v.dump(-1, ' ', false, json::error_handler_t::replace));
}

// Integer in [lo, 2^24]; the message shows the value as written.
int get_int(const json& v, const std::string& key, long long lo, const char* what) {
  constexpr long long kMaxInt = 1 << 24;
  OSLO_CHECK(v.is_number_integer(), OSLO_ERR_CONFIG, "config: \"", key,
             "\" must be an integer, got ", shown(v));
  // Numbers above INT64_MAX are stored unsigned: compare them as such.
  long long x = v.is_number_unsigned() ? static_cast<long long>(std::min<unsigned long long>(
                                             v.get<unsigned long long>(), kMaxInt + 1))
                                       : v.get<long long>();
  OSLO_CHECK(x >= lo && x <= kMaxInt, OSLO_ERR_CONFIG, "config: \"", key, "\" must be ", what,
             " and at most ", kMaxInt, ", got ", shown(v));
  return static_cast<int>(x);
}
int get_positive_int(const json& v, const std::string& key) {
  return get_int(v, key, 1, "positive");
}
int get_nonneg_int(const json& v, const std::string& key) {
  return get_int(v, key, 0, ">= 0");
}

std::string get_string(const json& v, const std::string& key) {
  OSLO_CHECK(v.is_string(), OSLO_ERR_CONFIG, "config: \"", key, "\" must be a string, got ",
             shown(v));
  return v.get<std::string>();
}

void apply_parallel_key(Config& c, const std::string& key, const json& v,
                        const std::string& where) {
  if (key == "tensor_parallel_size")
    c.tensor_parallel_size = get_positive_int(v, where + key);
  else if (key == "pipeline_parallel_size")
    c.pipeline_parallel_size = get_positive_int(v, where + key);
  else if (key == "data_parallel_size")
    c.data_parallel_size = get_positive_int(v, where + key);
  else
    fail(OSLO_ERR_CONFIG, "config: unknown key ", quote(where + key, '"'));
}

bool looks_like_json(const std::string& s) {
  for (char ch : s) {
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') continue;
    return ch == '{' || ch == '[' || ch == '"';
  }
  return false;
}

std::string errno_text(int err) {
  char buf[256];
  const char* s = strerror_r(err, buf, sizeof buf);
  return s ? s : "errno " + std::to_string(err);
}

// Reads a config file: only a regular file (a FIFO, a device such as
// /dev/zero or a directory is refused, and opening never blocks), and at most
// kMaxConfigFileBytes of it.
std::string read_config_file(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0)
    fail(OSLO_ERR_IO, "config: cannot read file ", quote_path(path), ": ", errno_text(errno),
         " (the config is neither JSON text nor a readable file)");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0)
    fail(OSLO_ERR_IO, "config: cannot stat file ", quote_path(path), ": ", errno_text(errno));
  OSLO_CHECK(S_ISREG(st.st_mode), OSLO_ERR_IO, "config: ", quote_path(path),
             " is not a regular file", S_ISDIR(st.st_mode) ? " (it is a directory)" : "");
  // Read up to one byte past the cap instead of trusting st_size (which is 0
  // for /proc files and may change while we read).
  std::string data;
  char buf[1 << 16];
  while (data.size() <= kMaxConfigFileBytes) {
    size_t want = std::min(sizeof buf, kMaxConfigFileBytes + 1 - data.size());
    ssize_t r = ::read(fd, buf, want);
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(OSLO_ERR_IO, "config: cannot read file ", quote_path(path), ": ", errno_text(errno));
    }
    if (r == 0) break;
    data.append(buf, static_cast<size_t>(r));
  }
  OSLO_CHECK(data.size() <= kMaxConfigFileBytes, OSLO_ERR_IO, "config: file ", quote_path(path),
             " is larger than the limit of ", kMaxConfigFileBytes, " bytes");
  return data;
}

// Parses JSON text, refusing duplicate keys (nlohmann would keep the last)
// and nesting deeper than kMaxDepth. Malformed JSON (including numbers out of
// range of a double) is OSLO_ERR_FORMAT.
json parse_json(const std::string& src, const std::string& origin) {
  struct Level {
    bool object;
    std::set<std::string> keys;
    std::string key;  // the object's current key
  };
  std::vector<Level> stack;
  auto path_of = [&](const std::string& key) {
    std::string p;
    for (size_t i = 0; i + 1 < stack.size(); ++i) p += stack[i].object ? stack[i].key + "." : "[].";
    return p + key;
  };
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        OSLO_CHECK(stack.size() < kMaxDepth, OSLO_ERR_CONFIG, origin, ": nested more than ",
                   kMaxDepth, " levels deep");
        stack.push_back(Level{ev == json::parse_event_t::object_start, {}, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end: stack.pop_back(); break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        OSLO_CHECK(stack.back().keys.insert(k).second, OSLO_ERR_CONFIG, origin, ": duplicate key ",
                   quote(path_of(k), '"'), " (each key may appear once)");
        stack.back().key = k;
        break;
      }
      case json::parse_event_t::value: break;
    }
    return true;
  };
  try {
    return json::parse(src, cb);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number beyond a double (1e400).
    fail(OSLO_ERR_FORMAT, origin, ": invalid JSON: ", clip(e.what(), 200));
  }
}

Config parse_config(const char* text) {
  Config c;
  if (!text || !*text) return c;
  std::string src(text);
  std::string origin = "config";
  if (!looks_like_json(src)) {
    origin = "config file " + quote_path(src);
    src = read_config_file(src);
  }
  json j = parse_json(src, origin);
  OSLO_CHECK(j.is_object(), OSLO_ERR_CONFIG, origin, ": must be a JSON object");

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "backend") {
      c.backend = get_string(v, key);
    } else if (key == "communicator") {
      c.communicator = get_string(v, key);
      OSLO_CHECK(
          c.communicator == "auto" || c.communicator == "backend" || c.communicator == "host",
          OSLO_ERR_CONFIG, "config: \"communicator\" is \"", c.communicator,
          "\": \"auto\" (the backend's own, else host transports), \"backend\" (the "
          "backend's own only) or \"host\" (oslo's host transports, staged through host "
          "memory for a device backend)");
    } else if (key == "backend_options") {
      OSLO_CHECK(v.is_object(), OSLO_ERR_CONFIG, "config: \"backend_options\" must be an object");
      c.backend_options = v.dump();
    } else if (key == "tensor_parallel_size" || key == "pipeline_parallel_size" ||
               key == "data_parallel_size") {
      apply_parallel_key(c, key, v, "");
    } else if (key == "model_parallelism") {
      OSLO_CHECK(v.is_object(), OSLO_ERR_CONFIG, "config: \"model_parallelism\" must be an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        apply_parallel_key(c, m.key(), m.value(), "model_parallelism.");
    } else if (key == "init_method") {
      c.init_method = get_string(v, key);
      parse_init_method(c.init_method);  // validate early, naming the key
    } else if (key == "rank") {
      c.rank = get_nonneg_int(v, key);
    } else if (key == "world_size") {
      c.world_size = get_positive_int(v, key);
    } else if (key == "local_rank") {
      c.local_rank = get_nonneg_int(v, key);
    } else if (key == "local_world_size") {
      c.local_world_size = get_positive_int(v, key);
    } else if (key == "timeout_seconds") {
      OSLO_CHECK(v.is_number(), OSLO_ERR_CONFIG,
                 "config: \"timeout_seconds\" must be a number, got ", shown(v));
      double t = v.get<double>();
      OSLO_CHECK(std::isfinite(t) && t > 0, OSLO_ERR_CONFIG,
                 "config: \"timeout_seconds\" must be positive, got ", shown(v));
      OSLO_CHECK(t <= kMaxTimeoutSeconds, OSLO_ERR_CONFIG,
                 "config: \"timeout_seconds\" must be at most ", kMaxTimeoutSeconds,
                 " (about 116 days), got ", shown(v));
      c.timeout_seconds = t;
    } else if (key == "num_threads") {
      c.num_threads = get_positive_int(v, key);
    } else if (key == "prepack") {
      c.prepack = get_string(v, key);
      OSLO_CHECK(c.prepack == "quantized" || c.prepack == "all" || c.prepack == "none",
                 OSLO_ERR_CONFIG, "config: \"prepack\" is \"", c.prepack,
                 "\": \"quantized\" (packed copies of block-quantized weights, the default), "
                 "\"all\" (of float weights too) or \"none\"");
    } else {
      fail(OSLO_ERR_CONFIG, "config: unknown key ", quote(key, '"'));
    }
  }
  if (c.rank >= 0 || c.world_size > 0) {
    OSLO_CHECK(c.rank >= 0 && c.world_size > 0, OSLO_ERR_CONFIG,
               "config: \"rank\" and \"world_size\" must be given together");
    OSLO_CHECK(c.rank < c.world_size, OSLO_ERR_CONFIG, "config: \"rank\" (", c.rank,
               ") must be below \"world_size\" (", c.world_size, ")");
  }
  return c;
}

}  // namespace

Config Config::parse(const char* text) {
  try {
    return parse_config(text);
  } catch (const nlohmann::json::exception& e) {
    // Every value's type is checked before it is read, so nlohmann should
    // have nothing left to reject; if it does, it is still bad input.
    fail(OSLO_ERR_CONFIG, "config: ", clip(e.what(), 200));
  }
}

InitMethod parse_init_method(const std::string& s) {
  InitMethod m;
  auto parse_hostport = [&](const std::string& hp) {
    std::string host, port;
    if (!hp.empty() && hp[0] == '[') {
      auto close = hp.find(']');
      OSLO_CHECK(close != std::string::npos && close + 1 < hp.size() && hp[close + 1] == ':',
                 OSLO_ERR_CONFIG, "config: \"init_method\" ", quote_path(s),
                 " is not tcp://[addr]:port");
      host = hp.substr(1, close - 1);
      port = hp.substr(close + 2);
    } else {
      auto colon = hp.rfind(':');
      OSLO_CHECK(colon != std::string::npos && colon > 0, OSLO_ERR_CONFIG,
                 "config: \"init_method\" ", quote_path(s), " is not tcp://host:port");
      host = hp.substr(0, colon);
      port = hp.substr(colon + 1);
    }
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    OSLO_CHECK(!port.empty() && end && *end == '\0' && p > 0 && p < 65536, OSLO_ERR_CONFIG,
               "config: \"init_method\" ", quote_path(s), " has an invalid port ", quote(port));
    m.host = host;
    m.port = static_cast<int>(p);
  };
  if (s == "env://") {
    m.kind = InitMethod::Env;
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    m.host = (addr && *addr) ? addr : "127.0.0.1";
    std::string p = (port && *port) ? port : "29500";
    char* end = nullptr;
    long x = std::strtol(p.c_str(), &end, 10);
    OSLO_CHECK(end && *end == '\0' && x > 0 && x < 65536, OSLO_ERR_CONFIG,
               "environment variable MASTER_PORT=", quote(p), " is not a port number");
    m.port = static_cast<int>(x);
  } else if (s.rfind("tcp://", 0) == 0) {
    m.kind = InitMethod::Tcp;
    parse_hostport(s.substr(6));
  } else if (s.rfind("file://", 0) == 0) {
    m.kind = InitMethod::File;
    m.path = s.substr(7);
    OSLO_CHECK(!m.path.empty() && m.path[0] == '/', OSLO_ERR_CONFIG, "config: \"init_method\" ",
               quote_path(s), " must be file:///absolute/path");
  } else {
    fail(OSLO_ERR_CONFIG, "config: \"init_method\" ", quote_path(s),
         " must start with env://, tcp:// or file://");
  }
  return m;
}

}  // namespace oslo
