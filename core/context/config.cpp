#include "core/context/config.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/common/error.hpp"

namespace oslo {
namespace {

using json = nlohmann::json;

int get_positive_int(const json& v, const std::string& key) {
  OSLO_CHECK(v.is_number_integer(), OSLO_ERR_CONFIG, "config: \"", key,
             "\" must be an integer, got ", v.dump());
  auto x = v.get<long long>();
  OSLO_CHECK(x > 0 && x <= (1 << 24), OSLO_ERR_CONFIG, "config: \"", key,
             "\" must be positive, got ", x);
  return static_cast<int>(x);
}

int get_nonneg_int(const json& v, const std::string& key) {
  OSLO_CHECK(v.is_number_integer(), OSLO_ERR_CONFIG, "config: \"", key,
             "\" must be an integer, got ", v.dump());
  auto x = v.get<long long>();
  OSLO_CHECK(x >= 0 && x <= (1 << 24), OSLO_ERR_CONFIG, "config: \"", key, "\" must be >= 0, got ",
             x);
  return static_cast<int>(x);
}

std::string get_string(const json& v, const std::string& key) {
  OSLO_CHECK(v.is_string(), OSLO_ERR_CONFIG, "config: \"", key, "\" must be a string, got ",
             v.dump());
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
    fail(OSLO_ERR_CONFIG, "config: unknown key \"", where + key, "\"");
}

bool looks_like_json(const std::string& s) {
  for (char ch : s) {
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') continue;
    return ch == '{' || ch == '[' || ch == '"';
  }
  return false;
}

}  // namespace

Config Config::parse(const char* text) {
  Config c;
  if (!text || !*text) return c;
  std::string src(text);
  std::string origin = "config";
  if (!looks_like_json(src)) {
    std::ifstream f(src);
    OSLO_CHECK(f.good(), OSLO_ERR_IO, "config: cannot read file '", src,
               "' (the config is neither JSON text nor a readable file)");
    std::stringstream ss;
    ss << f.rdbuf();
    origin = "config file '" + src + "'";
    src = ss.str();
  }
  json j;
  try {
    j = json::parse(src);
  } catch (const json::parse_error& e) {
    fail(OSLO_ERR_FORMAT, origin, ": invalid JSON: ", e.what());
  }
  OSLO_CHECK(j.is_object(), OSLO_ERR_CONFIG, origin, ": must be a JSON object");

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "backend") {
      c.backend = get_string(v, key);
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
                 "config: \"timeout_seconds\" must be a number, got ", v.dump());
      double t = v.get<double>();
      OSLO_CHECK(std::isfinite(t) && t > 0, OSLO_ERR_CONFIG,
                 "config: \"timeout_seconds\" must be positive, got ", v.dump());
      c.timeout_seconds = t;
    } else if (key == "num_threads") {
      c.num_threads = get_positive_int(v, key);
    } else {
      fail(OSLO_ERR_CONFIG, "config: unknown key \"", key, "\"");
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

InitMethod parse_init_method(const std::string& s) {
  InitMethod m;
  auto parse_hostport = [&](const std::string& hp) {
    std::string host, port;
    if (!hp.empty() && hp[0] == '[') {
      auto close = hp.find(']');
      OSLO_CHECK(close != std::string::npos && close + 1 < hp.size() && hp[close + 1] == ':',
                 OSLO_ERR_CONFIG, "config: \"init_method\" '", s, "' is not tcp://[addr]:port");
      host = hp.substr(1, close - 1);
      port = hp.substr(close + 2);
    } else {
      auto colon = hp.rfind(':');
      OSLO_CHECK(colon != std::string::npos && colon > 0, OSLO_ERR_CONFIG,
                 "config: \"init_method\" '", s, "' is not tcp://host:port");
      host = hp.substr(0, colon);
      port = hp.substr(colon + 1);
    }
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    OSLO_CHECK(!port.empty() && end && *end == '\0' && p > 0 && p < 65536, OSLO_ERR_CONFIG,
               "config: \"init_method\" '", s, "' has an invalid port '", port, "'");
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
               "environment variable MASTER_PORT='", p, "' is not a port number");
    m.port = static_cast<int>(x);
  } else if (s.rfind("tcp://", 0) == 0) {
    m.kind = InitMethod::Tcp;
    parse_hostport(s.substr(6));
  } else if (s.rfind("file://", 0) == 0) {
    m.kind = InitMethod::File;
    m.path = s.substr(7);
    OSLO_CHECK(!m.path.empty() && m.path[0] == '/', OSLO_ERR_CONFIG, "config: \"init_method\" '", s,
               "' must be file:///absolute/path");
  } else {
    fail(OSLO_ERR_CONFIG, "config: \"init_method\" '", s,
         "' must start with env://, tcp:// or file://");
  }
  return m;
}

}  // namespace oslo
