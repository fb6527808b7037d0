// Backward oracle of the encoder family (BERT, post-norm blocks, token
// types, the embeddings' norm, bidirectional attention): a gradient of the
// last hidden states supplied from outside (Model::hidden_backward), and
// every parameter's gradient against transformers' autograd on the same
// batch (tests/models/make_encoder_refs.py wrote
// <fixture>/backward_ref.safetensors). Each rank compares its own slices.
//
//   model_encoder_train_test FIXTURE_DIR --tp N          ranks as threads
//   oslo-run --nproc-per-node N model_encoder_train_test FIXTURE_DIR --procs
//   ... [--pad]   the pad row (run_pad) instead
//
// Passes when every parameter's max |grad - ref| <= 1e-4 max |ref| on every
// rank, the gradients accumulate on a second call, a supplied gradient of
// the wrong size, a token type outside the table, a non-finite gradient and
// a gradient differing between ranks are named errors on every rank, and
// the causal-LM loss is refused by name.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/common/grad_check.hpp"

using namespace oslo;
using oslo_test::SafetensorsRef;

namespace {

std::atomic<int> g_fail{0};

template <typename F>
void expect_error(F&& f, oslo_status want, const char* needle, const std::string& what, int r) {
  try {
    f();
    std::printf("[rank %d] %s: no error FAIL\n", r, what.c_str());
    ++g_fail;
  } catch (const Error& e) {
    const bool ok = e.status() == want && std::string(e.what()).find(needle) != std::string::npos;
    if (!ok || r == 0)
      std::printf("[rank %d] %s -> %s %s\n", r, what.c_str(), e.what(), ok ? "ok" : "FAIL");
    if (!ok) ++g_fail;
  }
}

void run_rank(Context& ctx, const std::string& dir, const SafetensorsRef& ref) {
  const int r = ctx.topology().tp_rank(), tp = ctx.topology().tp_size();
  ModelLoadOptions o;
  o.dtype = OSLO_DTYPE_F32;
  auto m = Model::load(ctx, dir, o);
  std::vector<int64_t> shape;
  const auto ids = ref.get<int64_t>("input_ids", &shape);
  const auto mask = ref.get<int64_t>("attention_mask");
  const auto types = ref.get<int64_t>("token_type_ids");
  const auto gh = ref.get<float>("grad_hidden");
  const int64_t B = shape[0], S = shape[1];
  m->training().hidden_backward(ids, mask, types, B, S, gh);
  const oslo_test::GradCheck c = oslo_test::check_grads(ctx, *m, ref, 1e-4);
  g_fail += c.failures;
  if (r == 0)
    std::printf("[tp %d] %zu gradients, worst %s at %.3g of max |ref| %s\n", tp,
                m->tensors().size(), c.worst_name.c_str(), c.worst, c.failures ? "FAIL" : "ok");
  // A second call accumulates: the gradients double.
  std::vector<float> before = oslo_test::download(ctx, m->training().grads()[0]);
  m->training().hidden_backward(ids, mask, types, B, S, gh);
  std::vector<float> after = oslo_test::download(ctx, m->training().grads()[0]);
  double err = 0, mx = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(after[i]) - 2.0 * before[i]));
    mx = std::max(mx, std::fabs(static_cast<double>(before[i])));
  }
  if (!(err <= 1e-6 * std::max(mx, 1e-12))) {
    std::printf("[rank %d] accumulation: %.3g off FAIL\n", r, err);
    ++g_fail;
  }
  // Bad input: a named error on every rank.
  std::vector<float> short_g(gh.begin(), gh.end() - 1);
  expect_error([&] { m->training().hidden_backward(ids, mask, types, B, S, short_g); },
               OSLO_ERR_SHAPE, "gradient", "a gradient of the wrong size", r);
  auto bad_types = types;
  bad_types[2] = 7;
  expect_error([&] { m->training().hidden_backward(ids, mask, bad_types, B, S, gh); },
               OSLO_ERR_INVALID_ARGUMENT, "token type 7", "a token type outside the table", r);
  auto nan_g = gh;
  nan_g[5] = std::nanf("");
  expect_error([&] { m->training().hidden_backward(ids, mask, types, B, S, nan_g); },
               OSLO_ERR_INVALID_ARGUMENT, "nan", "a NaN in the supplied gradient", r);
  if (tp > 1) {
    auto mine = gh;
    mine[0] += static_cast<float>(r);  // differs on every rank but 0
    expect_error([&] { m->training().hidden_backward(ids, mask, types, B, S, mine); },
                 OSLO_ERR_INVALID_ARGUMENT, "differs", "a gradient differing between ranks", r);
  }
  expect_error([&] { m->training().loss_backward(ids, ids, mask, B, S); }, OSLO_ERR_NOT_SUPPORTED,
               "causal", "the causal-LM loss of an encoder", r);
}

}  // namespace

// --pad: BERT's word_embeddings have padding_idx = pad_token_id
// (backward_pad_ref.safetensors, make_encoder_refs.py --pad: the pad id also
// a real token): the
// rows of the batch's ids within 1e-4 (relative to their largest) of torch's,
// the pad row's with no gradient from the lookup (the data tells that from
// an unmasked row by over 100x the tolerance).
void run_pad(Context& ctx, const std::string& dir) {
  const int r = ctx.topology().tp_rank(), tp = ctx.topology().tp_size();
  SafetensorsRef ref(dir + "/backward_pad_ref.safetensors");
  ModelLoadOptions o;
  o.dtype = OSLO_DTYPE_F32;
  auto m = Model::load(ctx, dir, o);
  std::vector<int64_t> shape;
  const auto ids = ref.get<int64_t>("input_ids", &shape);
  m->training().hidden_backward(ids, ref.get<int64_t>("attention_mask"),
                                ref.get<int64_t>("token_type_ids"), shape[0], shape[1],
                                ref.get<float>("grad_hidden"));
  const size_t e = static_cast<size_t>(m->training().embed_param());
  const Placement& pl = m->tensors()[e].placement;
  const int64_t H = pl.global_shape[1];
  const std::vector<float> got = oslo_test::download(ctx, m->training().grads()[e]);
  const auto row_ids = ref.get<int64_t>("grad_rows_ids");
  const auto rows = ref.get<float>("grad_rows");
  const auto with = ref.get<float>("grad_pad_with");
  const auto without = ref.get<float>("grad_pad_without");
  const int64_t pad = m->config().pad_token_id;
  double big = 0, lookup = 0;
  for (float v : rows) big = std::max(big, static_cast<double>(std::fabs(v)));
  for (size_t c = 0; c < with.size(); ++c)
    lookup = std::max(lookup, static_cast<double>(std::fabs(with[c] - without[c])));
  double worst = 0;
  int held = 0;
  bool pad_held = false;
  for (size_t i = 0; i < row_ids.size(); ++i)
    for (const Segment& s : pl.segments) {
      const int64_t g = row_ids[i];
      if (g < s.global_start || g >= s.global_start + s.length) continue;
      const int64_t lr = s.local_start + g - s.global_start;
      ++held;
      pad_held = pad_held || g == pad;
      for (int64_t c = 0; c < H; ++c)
        worst =
            std::max(worst, std::fabs(static_cast<double>(got[static_cast<size_t>(lr * H + c)]) -
                                      rows[i * static_cast<size_t>(H) + static_cast<size_t>(c)]));
    }
  const bool ok = worst <= 1e-4 * big && m->config().embed_pad_row == pad && lookup > 1e-2 * big;
  std::printf(
      "[rank %d tp %d] word embeddings, %d rows of the batch's ids held%s: max |diff| %.3g "
      "of max %.3g (the pad row's lookup share %.3g, masked as padding_idx) %s\n",
      r, tp, held, pad_held ? " (the pad row among them)" : "", worst, big, lookup,
      ok ? "ok" : "FAIL");
  if (!ok) ++g_fail;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s FIXTURE_DIR --tp N | --procs [--pad]\n", argv[0]);
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string dir = argv[1];
  const bool procs = !std::strcmp(argv[2], "--procs");
  const int tp = procs ? (std::getenv("WORLD_SIZE") ? std::atoi(std::getenv("WORLD_SIZE")) : 1)
                       : (argc > 3 ? std::atoi(argv[3]) : 1);
  bool pad = false;
  for (int i = 2; i < argc; ++i) pad = pad || !std::strcmp(argv[i], "--pad");
  SafetensorsRef ref(dir + "/backward_ref.safetensors");
  g_fail += oslo_test::run_tp(procs, tp, [&](Context& ctx) {
    if (pad)
      run_pad(ctx, dir);
    else
      run_rank(ctx, dir, ref);
  });
  return g_fail ? 1 : 0;
}
