// oslo train's parts besides the command itself (cmd_train.cpp): the data
// (train_data.cpp: text, JSON lines, flat and Megatron-LM token files) and
// the bookkeeping (train_support.cpp: checkpoints, the data order, the log's
// fingerprint, the progress report). Single-threaded, like the command.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/oslo/cli.hpp"

namespace oslo_cli {

// ---------------------------------------------------------------------------
// The data (train_data.cpp)
// ---------------------------------------------------------------------------

// The token stream of --data and how it is cut into rows of --seq-len
// tokens: row r is tokens [r stride, r stride + seq_len). Text (.txt, .jsonl
// with "text") and JSON lines of "input_ids" are cut as transformers'
// run_clm cuts them (stride = seq_len: rows side by side); flat .bin token
// files (nanoGPT) and Megatron-LM indexed datasets as those tools cut
// samples (stride = seq_len - 1: consecutive rows share a token, so that
// every token but the first is a label exactly once).
struct TrainData {
  std::vector<int32_t> tokens;  // ids >= 0
  int64_t stride = 0;
  std::string what;  // the data in words, e.g. "12 documents", "a flat uint16 token file"
  // Where token i comes from ("FILE:LINE: input_ids[k]", "FILE: token i at
  // byte b", ...), for errors about it.
  std::function<std::string(int64_t)> where;

  // The rows of seq_len tokens (0 when there are fewer tokens).
  int64_t rows(int64_t seq_len) const;
  // Copies row `r` (seq_len tokens) to `out`.
  void copy_row(int64_t r, int64_t seq_len, int64_t* out) const;
};

// Reads --data as the format its name says (docs/CLI.md, "Data"):
//   FILE.txt             one document of text;
//   FILE.jsonl           a JSON object per line: "input_ids" (an array of
//                        token ids) in every line, or "text" in every line;
//   FILE.bin             a Megatron-LM indexed dataset when FILE.idx exists,
//                        else flat token ids, --data-dtype uint16 (default)
//                        or uint32, little-endian;
//   FILE.idx, PREFIX     a Megatron-LM indexed dataset (PREFIX.bin + .idx).
// Text is tokenized with load_tokenizer(a) (documents followed by EOS);
// token ids are used as they are. Errors (a missing or malformed file, a
// truncated or lying one, a bad id) die_all() naming the file and place:
// status 2 for options, 1 for data. Every rank calls it alike.
TrainData read_train_data(const Args& a, int64_t seq_len);

// Fails (die_all, status 1) naming the first token id of `d` that is not
// below `vocab_size` and where it comes from.
void check_vocabulary(const TrainData& d, int64_t vocab_size);

// ---------------------------------------------------------------------------
// Bookkeeping (train_support.cpp)
// ---------------------------------------------------------------------------

// The state a training checkpoint carries besides the model and optimizer:
// the data order's seed, the epochs completed and where in the current
// epoch's order the run stands: data_position counts rows (samples) of that
// order consumed by all data-parallel ranks together, so that it means the
// same global progress at any data-parallel size. Field for field
// oslo_train_state.
struct TrainState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t data_position = 0;
};

// The training checkpoint (--save, --save-every): the model's weights (a
// parallel checkpoint oslo merge turns into a Hugging Face folder), the
// optimizer state, step, loss scaler and `state` (oslo_checkpoint_save).
// Collective over the world.
void save_checkpoint(oslo_model* model, oslo_optimizer* opt, const std::string& dir,
                     const TrainState& state);

// --resume DIR: restores weights, optimizer state, step, loss scaler and
// *state from a checkpoint save_checkpoint wrote (oslo_checkpoint_load).
// Collective over the world.
void load_checkpoint(oslo_optimizer* opt, const std::string& dir, TrainState* state);

// What a resumed run must share with the run that saved a checkpoint for
// its data to continue exactly: the rows (data and --seq-len), the global
// micro-batch (data-parallel size x --batch-size rows) and --grad-accum.
// Rank 0 writes them to DIR/oslo_train.json after each save, with the save
// id of the manifest they belong to (oslo_checkpoint.json's "save_id": a
// file left by an earlier save, e.g. when a run stopped between the two
// writes, is recognized and ignored). Other files in a checkpoint folder
// are left alone by saves (core/checkpoint/FORMAT.md).
struct DataShape {
  int64_t rows = 0, seq_len = 0, global_batch = 0, grad_accum = 0;
  int64_t dp = 0, batch_size = 0;  // reported, not compared
};

// "oslo_train.json".
extern const char* const kTrainMeta;

// Rank 0, after a save: DIR/oslo_train.json, atomically (temporary, rename).
void write_data_shape(const std::string& dir, const DataShape& d);

// --resume DIR: the DataShape its oslo_train.json records, if it belongs to
// DIR's checkpoint (false: none; *stale when it is one of an earlier save).
// Every rank reads it; a malformed file is an error on every rank.
bool read_data_shape(const std::string& dir, DataShape* d, bool* stale);

// The order of the rows in `epoch`: a Fisher-Yates shuffle of 0..rows-1
// driven by SplitMix64 seeded from (seed, epoch), the same on every rank,
// platform and version.
std::vector<int64_t> epoch_order(int64_t rows, uint64_t seed, int64_t epoch);

// FNV-1a over token ids (8 little-endian bytes each), continuing from `h`:
// the fingerprint of a step's data in the log.
uint64_t fnv1a(uint64_t h, const std::vector<int64_t>& ids);

// Rank 0's progress report on stderr: a bar redrawn in place on a terminal,
// otherwise plain lines (the first step, about every 2% of the run, the last).
struct Progress {
  bool on = false, tty = false, drawn = false;
  int64_t total = 0;
  // Step `done` of `total`; bubble >= 0: the pipeline's measured bubble,
  // shown too.
  void step(int64_t done, double loss, double tok_s, double elapsed, double bubble = -1);
  // A message between bar updates.
  void say(const std::string& s);
  // Ends a bar drawn in place with a newline.
  void end();
};

// mkdir -p DIR (die_all naming the part that cannot be created).
void make_dirs(const std::string& dir);

}  // namespace oslo_cli
