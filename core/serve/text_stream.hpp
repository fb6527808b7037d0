// A request's generated text, piece by piece as its tokens arrive, with
// stop strings: what a streaming server sends after each step.
//
// Decoding: a token's text often depends on its neighbours (a byte-level
// BPE token may hold half of a UTF-8 character; SentencePiece drops the
// space of the first token of a string), so each new token's text is the
// difference between decoding a short window of tokens with and without it
// (Hugging Face tokenizers' DecodeStream and vLLM's incremental
// detokenizer do the same): text is released only when the window's
// decoding does not end in U+FFFD (an incomplete character), so every
// piece is whole UTF-8 characters.
//
// Stop strings (OpenAI's `stop`): the text never includes a stop string or
// anything after it; a piece holds back its tail while that tail could be
// the start of a stop string, so a stop string split over several tokens
// is still found. The first stop string to complete (earliest in the text)
// ends the stream.
//
// Not thread-safe: one request, one stepping thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace oslo {
namespace serve {

class TextStream {
 public:
  // decode(ids, n): the text of n token ids (the tokenizer's decode, with
  // the request's special-token rule). stops: the stop strings (empty ones
  // are refused: oslo::Error OSLO_ERR_INVALID_ARGUMENT).
  using Decode = std::function<std::string(const int64_t* ids, size_t n)>;
  TextStream(Decode decode, std::vector<std::string> stops);

  struct Piece {
    std::string text;      // new text to send (may be empty)
    bool stopped = false;  // a stop string completed: the stream is over
    std::string stop;      // which one
  };
  // Adds one generated token. After a stop, further tokens are ignored.
  Piece push(int64_t token);
  // The text held back at the end of a request that finished another way
  // (length, EOS, cancel): an incomplete character decodes as the decoder
  // writes it (U+FFFD); a held-back tail that never became a stop string
  // is released.
  std::string flush();
  // All text released so far (what a non-streaming response returns).
  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }

 private:
  // Releases the new text `more` through the stop-string check.
  Piece release(const std::string& more);

  Decode decode_;
  std::vector<std::string> stops_;
  size_t longest_stop_ = 0;
  std::vector<int64_t> ids_;
  size_t prefix_ = 0, read_ = 0;  // the decoding window: [prefix_, read_) decoded already
  std::string held_;              // decoded, not yet released (a possible stop's start)
  std::string text_;
  bool stopped_ = false;
};

}  // namespace serve
}  // namespace oslo
