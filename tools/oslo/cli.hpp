// The `oslo` command's shared parts: errors, option parsing, numbers, the
// context, model and tokenizer every multi-rank command builds, and each
// command's entry point (cmd_<name>.cpp; main.cpp dispatches). Everything
// is single-threaded: the command runs on the process's main thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/checkpoint/model_checkpoint.hpp"
#include "oslo.h"

namespace oslo_cli {

// This process's rank in the world (0 until context() made one); only rank
// 0 prints results and die()'s messages.
extern int g_rank;

// Thrown to leave a command with exit status `code` once the message is
// printed (main() returns it).
struct Fail {
  int code;
};

// Prints "oslo: MSG" on rank 0 and throws Fail{code} (2: usage, 1: failure).
[[noreturn]] void die(const std::string& msg, int code = 1);

// The same on every rank, prefixed "[rank N] " under a launcher of more
// than one rank: for errors every rank meets alike (options, data files),
// so that the message is there whichever rank the launcher sees exit first.
[[noreturn]] void die_all(const std::string& msg, int code = 1);

// die()s with "WHAT: STATUS: last error" unless `st` is OSLO_OK.
void check(oslo_status st, const std::string& what);

// --name value / --flag arguments after the subcommand.
struct Args {
  std::map<std::string, std::vector<std::string>> opts;
  std::vector<std::string> pos;
  bool has(const std::string& k) const { return opts.count(k) != 0; }
  // The last value of --k (def without one).
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = opts.find(k);
    return it == opts.end() ? def : it->second.back();
  }
  // Every value of --k, in order.
  const std::vector<std::string>& all(const std::string& k) const {
    static const std::vector<std::string> none;
    auto it = opts.find(k);
    return it == opts.end() ? none : it->second;
  }
};

// Parses argv[first..]: the `flags` take no value, the `valued` options
// one; anything else starting with "--" is an error (status 2).
Args parse(int argc, char** argv, int first, const std::vector<std::string>& flags,
           const std::vector<std::string>& valued);

// A decimal integer / finite real, else die(WHAT: not an integer/number, 2).
int64_t to_int(const std::string& s, const std::string& what);
double to_num(const std::string& s, const std::string& what);

// --dtype f32|bf16|f16 or a block-quantized format (q8_0, q4_0, q4_k,
// q6_k: a model's dtype, docs/QUANTIZATION.md) as an oslo_dtype (-1 for "";
// else status 2). Merge and reshard take the float ones only.
int dtype_of(const std::string& s);
// --kv-dtype f32|int8 (also i8) as an oslo_dtype (F32 for ""; else status 2).
oslo_dtype kv_dtype_of(const std::string& s);

// The valued options of every command that loads a model on a context
// (generate, embed, train), which context(), load_model() and
// load_tokenizer() read: --model, --tokenizer, --dtype, --tp, --pp,
// --pp-layers, --virtual-stages, --threads, --backend, --device,
// --backend-options, --communicator and --timeout; after the command's
// `own`.
std::vector<std::string> model_options(std::vector<std::string> own);

// The world size the launcher announces (1 without one).
int launcher_world();

// The context's timeout from --timeout SECONDS, else the environment's
// OSLO_TIMEOUT (-1: neither; the config's default then). A value that is
// not a number of seconds in (0, 1e7] is an error (status 2, every rank).
double timeout_seconds(const Args& a);

// A context for this process: the world from the launcher's environment
// (oslo-run, torchrun, mpirun, srun) or a single rank. tp > 0 and dp > 0
// (oslo train) set the tensor- and data-parallel sizes; otherwise --pp N
// (generate, embed) cuts the blocks into N pipeline stages and the
// tensor-parallel size is --tp or what is left of the world. The timeout of
// the rendezvous and of every collective is --timeout SECONDS, else the
// environment's OSLO_TIMEOUT, else the config's default (300 s). Sets
// g_rank. The caller owns the context.
oslo_context* context(const Args& a, int tp = 0, int dp = 0);

// --model DIR loaded on `ctx` with --dtype, --virtual-stages, --pp-layers.
// The caller owns the model.
oslo_model* load_model(oslo_context* ctx, const Args& a);

// The tokenizer of --tokenizer DIR or the --model folder (NULL when there
// is none and !required; required: die()s). The caller owns it.
oslo_tokenizer* load_tokenizer(const Args& a, bool required);

// Tokenizes `text` (with the tokenizer's special tokens if `special`).
std::vector<int64_t> encode(oslo_tokenizer* t, const std::string& text, bool special);

// Decodes `ids`, skipping special tokens.
std::string decode(oslo_tokenizer* t, const std::vector<int64_t>& ids);

// A progress callback for merge and reshard: a line on stderr every 10%.
oslo::ProgressFn progress(const char* what);

// The commands: argv[1] is the command's name, its options follow. Each
// returns the exit status or throws Fail (or an oslo::Error from the
// checkpoint tier).
int cmd_generate(int argc, char** argv);
int cmd_embed(int argc, char** argv);
int cmd_merge(int argc, char** argv);
int cmd_reshard(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_serve(int argc, char** argv);  // only with OSLO_CLI_SERVE (cpp-httplib)

}  // namespace oslo_cli
