// oslo train's bookkeeping (train.hpp): checkpoints and their data shape,
// the data order, the log's fingerprint, the progress report.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "tools/oslo/train.hpp"

namespace oslo_cli {

void save_checkpoint(oslo_model* model, oslo_optimizer* opt, const std::string& dir,
                     const TrainState& state) {
  (void)model;
  const oslo_train_state s = {state.seed, state.epoch, state.data_position};
  check(oslo_checkpoint_save(opt, dir.c_str(), &s), "save checkpoint " + dir);
}

void load_checkpoint(oslo_optimizer* opt, const std::string& dir, TrainState* state) {
  oslo_train_state s = {0, 0, 0};
  check(oslo_checkpoint_load(opt, dir.c_str(), &s), "resume from " + dir);
  *state = TrainState{s.seed, s.epoch, s.data_position};
}

const char* const kTrainMeta = "oslo_train.json";

namespace {

// The save id of DIR's manifest ("" if unreadable).
std::string manifest_save_id(const std::string& dir) {
  std::ifstream f(dir + "/oslo_checkpoint.json", std::ios::binary);
  if (!f) return "";
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    if (j.is_object() && j.contains("save_id") && j["save_id"].is_string())
      return j["save_id"].get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
  return "";
}

}  // namespace

// Rank 0, after a save: DIR/oslo_train.json, atomically (temporary, rename).
void write_data_shape(const std::string& dir, const DataShape& d) {
  if (g_rank != 0) return;
  nlohmann::json j;
  j["save_id"] = manifest_save_id(dir);
  j["rows"] = d.rows;
  j["seq_len"] = d.seq_len;
  j["global_batch"] = d.global_batch;
  j["grad_accum"] = d.grad_accum;
  j["data_parallel_size"] = d.dp;
  j["batch_size"] = d.batch_size;
  const std::string path = dir + "/" + kTrainMeta, tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  const std::string text = j.dump(1) + "\n";
  const bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f && std::fclose(f) != 0) f = nullptr;
  if (!ok || !f || std::rename(tmp.c_str(), path.c_str()) != 0)
    die("cannot write " + path + ": " + std::strerror(errno));
}

// --resume DIR: the DataShape its oslo_train.json records, if it belongs to
// DIR's checkpoint (false: none; *stale when it is one of an earlier save).
// Every rank reads it; a malformed file is an error on every rank.
bool read_data_shape(const std::string& dir, DataShape* d, bool* stale) {
  const std::string path = dir + "/" + kTrainMeta;
  *stale = false;
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception&) {
    die_all("--resume " + dir + ": " + path +
            " is not valid JSON (delete it to resume without "
            "its checks)");
  }
  const auto num = [&](const char* k) {
    if (!j.is_object() || !j.contains(k) || !j[k].is_number_integer() || j[k].get<int64_t>() < 1)
      die_all("--resume " + dir + ": " + path + ": \"" + k + "\" is not a positive integer");
    return j[k].get<int64_t>();
  };
  if (!j.is_object() || !j.contains("save_id") || !j["save_id"].is_string())
    die_all("--resume " + dir + ": " + path + ": no \"save_id\" string");
  if (j["save_id"].get<std::string>() != manifest_save_id(dir)) {
    *stale = true;
    return false;
  }
  *d = DataShape{num("rows"),
                 num("seq_len"),
                 num("global_batch"),
                 num("grad_accum"),
                 num("data_parallel_size"),
                 num("batch_size")};
  return true;
}

namespace {

// SplitMix64 (Steele, Lea, Flood 2014): the generator of the data order,
// written here so that the order is the same on every rank, platform and
// version.
uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

// The order of the packed rows in `epoch`: a Fisher-Yates shuffle of
// 0..rows-1 driven by SplitMix64 seeded from (seed, epoch); indices drawn
// without modulo bias (rejection).
std::vector<int64_t> epoch_order(int64_t rows, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) order[static_cast<size_t>(i)] = i;
  uint64_t s = seed;
  s = splitmix64(s) ^ static_cast<uint64_t>(epoch);
  for (int64_t i = rows - 1; i > 0; --i) {
    const uint64_t bound = static_cast<uint64_t>(i) + 1;
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    uint64_t r;
    do r = splitmix64(s);
    while (r < threshold);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(r % bound)]);
  }
  return order;
}

// FNV-1a over token ids: the fingerprint of a step's data in the log.
uint64_t fnv1a(uint64_t h, const std::vector<int64_t>& ids) {
  for (int64_t v : ids)
    for (int i = 0; i < 8; ++i) {
      h ^= (static_cast<uint64_t>(v) >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  return h;
}

namespace {

std::string clock_text(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

}  // namespace

void Progress::step(int64_t done, double loss, double tok_s, double elapsed, double bubble) {
  if (!on) return;
  const double eta =
      done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total - done) : NAN;
  char bub[32] = "";
  if (bubble >= 0) std::snprintf(bub, sizeof bub, " bubble %.1f%%", 100 * bubble);
  if (tty) {
    const int width = 24;
    const int fill = static_cast<int>(width * done / std::max<int64_t>(total, 1));
    std::fprintf(stderr, "\r\033[K%*lld/%lld [%s%s] loss %.4f | %.0f tok/s%s | ETA %s",
                 static_cast<int>(std::to_string(total).size()), static_cast<long long>(done),
                 static_cast<long long>(total), std::string(static_cast<size_t>(fill), '#').c_str(),
                 std::string(static_cast<size_t>(width - fill), '.').c_str(), loss, tok_s, bub,
                 clock_text(eta).c_str());
    drawn = true;
    return;
  }
  const int64_t every = std::max<int64_t>(1, total / 50);
  if (done == 1 || done % every == 0 || done == total)
    std::fprintf(stderr, "oslo: step %lld/%lld loss %.4f %.0f tok/s%s elapsed %s ETA %s\n",
                 static_cast<long long>(done), static_cast<long long>(total), loss, tok_s, bub,
                 clock_text(elapsed).c_str(), clock_text(eta).c_str());
}
void Progress::say(const std::string& s) {
  if (!on) return;
  if (drawn) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "oslo: %s\n", s.c_str());
  drawn = false;  // the next step draws the bar on a line of its own
}
void Progress::end() {
  if (on && drawn) std::fprintf(stderr, "\n");
  drawn = false;
}

void make_dirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i)
    if (i == dir.size() || dir[i] == '/') {
      const std::string p = dir.substr(0, i);
      if (::mkdir(p.c_str(), 0777) != 0 && errno != EEXIST)
        die_all("cannot create " + p + ": " + std::strerror(errno));
    }
}

}  // namespace oslo_cli
