#include "core/common/log.hpp"

#include <strings.h>
#include <cstdio>
#include <cstdlib>

namespace oslo {

bool Logger::parse_level(const char* s, LogLevel* out) {
  static const struct {
    const char* name;
    LogLevel level;
  } names[] = {{"error", LogLevel::Error},
               {"warn", LogLevel::Warn},
               {"warning", LogLevel::Warn},
               {"info", LogLevel::Info},
               {"debug", LogLevel::Debug}};
  for (const auto& n : names) {
    if (strcasecmp(s, n.name) == 0) {
      *out = n.level;
      return true;
    }
  }
  return false;
}

Logger::Logger() : level_(LogLevel::Warn) {
  const char* env = std::getenv("OSLO_LOG_LEVEL");
  if (env && *env && !parse_level(env, &level_)) {
    level_ = LogLevel::Warn;
    write(LogLevel::Warn,
          str("ignoring unknown OSLO_LOG_LEVEL '", env, "' (use error, warn, info or debug)"));
  }
}

void Logger::write(LogLevel l, const std::string& msg) const {
  static const char* tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
  char prefix[32];
  if (rank_ >= 0)
    std::snprintf(prefix, sizeof prefix, "[rank %d]", rank_);
  else
    std::snprintf(prefix, sizeof prefix, "[oslo]");
  // One fprintf per line so lines from different ranks do not interleave mid-line.
  std::fprintf(stderr, "%s oslo %s %s\n", prefix, tags[static_cast<int>(l)], msg.c_str());
}

}  // namespace oslo
