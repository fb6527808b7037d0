#include "core/serve/text_stream.hpp"

#include <algorithm>

#include "core/common/error.hpp"

namespace oslo {
namespace serve {
namespace {

// Whether s ends with U+FFFD (EF BF BD): the decoder met an incomplete
// character.
bool ends_incomplete(const std::string& s) {
  return s.size() >= 3 && static_cast<unsigned char>(s[s.size() - 3]) == 0xEF &&
         static_cast<unsigned char>(s[s.size() - 2]) == 0xBF &&
         static_cast<unsigned char>(s[s.size() - 1]) == 0xBD;
}

}  // namespace

TextStream::TextStream(Decode decode, std::vector<std::string> stops)
    : decode_(std::move(decode)), stops_(std::move(stops)) {
  if (!decode_) throw Error(OSLO_ERR_INVALID_ARGUMENT, "text stream: no decode function");
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty())
      throw Error(OSLO_ERR_INVALID_ARGUMENT, str("stop string ", i, " is empty"));
    longest_stop_ = std::max(longest_stop_, stops_[i].size());
  }
}

TextStream::Piece TextStream::push(int64_t token) {
  if (stopped_) return {};
  ids_.push_back(token);
  const std::string before = decode_(ids_.data() + prefix_, read_ - prefix_);
  const std::string after = decode_(ids_.data() + prefix_, ids_.size() - prefix_);
  if (after.size() <= before.size() || ends_incomplete(after)) return {};
  // The window moves on: the next token's text is decoded after the last one.
  prefix_ = read_;
  read_ = ids_.size();
  return release(after.substr(before.size()));
}

TextStream::Piece TextStream::release(const std::string& more) {
  Piece p;
  held_ += more;
  // The earliest stop string in the held text (any match ends before the
  // released text: the released part holds no stop's start).
  size_t at = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t f = held_.find(s);
    if (f < at) {
      at = f;
      p.stop = s;
    }
  }
  if (at != std::string::npos) {
    p.text = held_.substr(0, at);
    p.stopped = stopped_ = true;
    held_.clear();
    text_ += p.text;
    return p;
  }
  // Hold back the longest tail that a stop string starts with.
  size_t keep = 0;
  const size_t max_keep = std::min(held_.size(), longest_stop_ ? longest_stop_ - 1 : 0);
  for (size_t k = max_keep; k > 0 && keep == 0; --k)
    for (const std::string& s : stops_)
      if (s.size() > k && held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  p.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  text_ += p.text;
  return p;
}

std::string TextStream::flush() {
  if (stopped_) return {};
  std::string out;
  if (read_ < ids_.size()) {
    const std::string before = decode_(ids_.data() + prefix_, read_ - prefix_);
    const std::string after = decode_(ids_.data() + prefix_, ids_.size() - prefix_);
    if (after.size() > before.size()) held_ += after.substr(before.size());
    read_ = prefix_ = ids_.size();
  }
  // What is held could still hold a stop string (held back only as a
  // possible start): release() finds it.
  Piece p = release(std::string());
  out = p.text;
  if (!p.stopped) {
    out += held_;
    text_ += held_;
    held_.clear();
  }
  stopped_ = true;
  return out;
}

}  // namespace serve
}  // namespace oslo
