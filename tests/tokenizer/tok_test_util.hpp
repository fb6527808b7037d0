// Helpers of the tokenizer tests.
#pragma once

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "core/common/error.hpp"

namespace tok_test {

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs body; returns OSLO_OK or the status of the oslo::Error it threw
// (the message into *msg). Other exceptions are test failures (-1).
template <typename F>
int status_of(F&& body, std::string* msg = nullptr) {
  try {
    body();
    return OSLO_OK;
  } catch (const oslo::Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  } catch (const std::exception& e) {
    if (msg) *msg = std::string("non-oslo exception: ") + e.what();
    return -1;
  }
}

// Printable form of a string for failure messages.
inline std::string show(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
      char buf[8];
      snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace tok_test
