// `oslo serve`'s OpenAI dialect, without HTTP: a /v1/completions or
// /v1/chat/completions body checked and turned into engine requests
// (ids, generate options, stop strings), and the response and stream
// chunk objects built back. Every problem with a body is an ApiError
// carrying the HTTP status and OpenAI's error fields. Used by
// serve_http.cpp; no state, thread-safe (the tokenizer is).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "oslo.h"

namespace oslo_cli {
namespace serve {

// An error answered as {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
  int http;           // 400, 401, 404, 413, 500, 503
  std::string type;   // invalid_request_error, authentication_error, server_error, ...
  std::string param;  // the offending field, "" for none
  std::string code;   // model_not_found, context_length_exceeded, ..., "" for none
  ApiError(int http_status, std::string message, std::string param_name = "",
           std::string error_code = "", std::string error_type = "")
      : std::runtime_error(std::move(message)),
        http(http_status),
        type(error_type.empty() ? (http_status >= 500 ? "server_error" : "invalid_request_error")
                                : std::move(error_type)),
        param(std::move(param_name)),
        code(std::move(error_code)) {}
  // The response body.
  nlohmann::json body() const;
};

// What the server knows about what it serves.
struct Served {
  std::string model_name;           // the id clients put in "model"
  const oslo_tokenizer* tokenizer;  // required
  std::string chat_template;        // --chat-template's source; "" = the tokenizer's
  bool has_chat_template;           // either of them exists
  int64_t max_positions;            // the model's context length
  int64_t vocab_size;
};

enum class Endpoint { kCompletions, kChat };

// One engine request of a body (a body with several prompts or n > 1 has
// several: their choice index is their place in the list).
struct Prompt {
  std::vector<int64_t> ids;
  std::string echo_text;  // the prompt's text (for echo)
};

// A checked body.
struct GenRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::vector<Prompt> prompts;  // one per choice, in order
  oslo_generate_options options{};
  bool ignore_eos = false;  // options lists no EOS ids
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;
  bool seeded = false;  // "seed" given: choice i samples with seed + i
};

// Checks `body` (the raw request body) for `endpoint` and builds the
// request: its prompts tokenized (chat: rendered with the chat template),
// its sampling parameters as generate options. Throws ApiError naming the
// field for malformed JSON or UTF-8, unknown fields, wrong types and
// ranges, an unknown model, unsupported features (logprobs, tools, ...)
// and prompts that do not fit the context.
GenRequest parse_request(Endpoint endpoint, const std::string& body, const Served& served);

// "cmpl-…" / "chatcmpl-…": unique within the process, not guessable.
std::string new_response_id(Endpoint endpoint);

// OpenAI's finish_reason for an engine finish ("stop", "length", "abort";
// null while running).
nlohmann::json finish_reason(oslo_finish_reason f);

// A whole response (non-streaming): choices[i] = texts[i] finished with
// finishes[i]; usage from the token counts.
nlohmann::json response(const GenRequest& r, const std::string& id, int64_t created,
                        const std::string& model, const std::vector<std::string>& texts,
                        const std::vector<oslo_finish_reason>& finishes, int64_t prompt_tokens,
                        int64_t completion_tokens);

// One streaming chunk of choice `index`: `text` (chat: the delta's
// content; `first` adds the assistant role) and its finish (NONE: null).
nlohmann::json chunk(const GenRequest& r, const std::string& id, int64_t created,
                     const std::string& model, size_t index, const std::string& text,
                     oslo_finish_reason finish, bool first);

// The usage chunk of stream_options.include_usage (choices empty).
nlohmann::json usage_chunk(const GenRequest& r, const std::string& id, int64_t created,
                           const std::string& model, int64_t prompt_tokens,
                           int64_t completion_tokens);

// JSON text safe for any output: invalid UTF-8 becomes U+FFFD.
std::string dump(const nlohmann::json& j);

}  // namespace serve
}  // namespace oslo_cli
