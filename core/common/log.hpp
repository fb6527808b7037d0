// Logging in the spirit of NCCL_DEBUG: OSLO_LOG_LEVEL=error|warn|info|debug
// (default warn), every line on stderr prefixed with "[rank N]" (or "[oslo]"
// before the rank is known). The level is read once per Logger; the logger
// belongs to a context, so there is no global logging state.
#pragma once

#include <string>

#include "core/common/error.hpp"

namespace oslo {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

class Logger {
 public:
  Logger();  // reads OSLO_LOG_LEVEL
  void set_rank(int rank) { rank_ = rank; }
  bool enabled(LogLevel l) const { return static_cast<int>(l) <= static_cast<int>(level_); }
  void write(LogLevel l, const std::string& msg) const;
  template <typename... Parts>
  void log(LogLevel l, Parts&&... parts) const {
    if (enabled(l)) write(l, str(std::forward<Parts>(parts)...));
  }
  LogLevel level() const { return level_; }
  // Parses a level name; returns false on an unknown name.
  static bool parse_level(const char* s, LogLevel* out);

 private:
  LogLevel level_;
  int rank_ = -1;
};

}  // namespace oslo
