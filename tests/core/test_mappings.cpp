// Tests of the communication ops of core/parallel/mappings that the layers
// use and no other test reaches alone: reduce_max, gather_first_dim and its
// backward reduce_scatter_first_dim, on a group of one (the fast path) and
// of three ranks (threads, each with its own context), against values
// computed here from each rank's inputs.
//   test_mappings WORLD
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/capi/handles.hpp"
#include "core/common/error.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/view.hpp"

namespace {

std::atomic<int> failures{0};

void check(bool ok, int rank, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  ++failures;
}

oslo::Tensor upload(oslo::Context& ctx, const std::vector<float>& v,
                    const std::vector<int64_t>& shape) {
  oslo::Tensor t = oslo::scratch(ctx.backend_ptr(), OSLO_DTYPE_F32, shape);
  ctx.backend().copy(t.data(), v.data(), v.size() * sizeof(float), oslo::CopyKind::HostToDevice);
  return t;
}

std::vector<float> download(oslo::Context& ctx, const oslo::Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  ctx.backend().copy(v.data(), t.data(), v.size() * sizeof(float), oslo::CopyKind::DeviceToHost);
  return v;
}

// Rank r's input element i of each case (every rank computes the others').
float max_input(int r, int i) {
  return static_cast<float>((i * 7 + r * 3) % 5) - 2.5f;
}
float gather_input(int r, int i) {
  return 100.0f * static_cast<float>(r) + static_cast<float>(i);
}
float scatter_input(int r, int j) {
  return static_cast<float>(r) + 0.5f * static_cast<float>(j);
}

void run_rank(int rank, int world, const std::string& store) {
  const std::string cfg =
      "{\"rank\": " + std::to_string(rank) + ", \"world_size\": " + std::to_string(world) +
      ", \"init_method\": \"file://" + store + "\", \"timeout_seconds\": 60, \"num_threads\": 1}";
  oslo_context* h = nullptr;
  if (oslo_context_create(cfg.c_str(), &h) != OSLO_OK) {
    check(false, rank, std::string("oslo_context_create: ") + oslo_last_error());
    return;
  }
  oslo::Context& ctx = *h->impl;
  const oslo_group g = OSLO_GROUP_WORLD;
  const int rows = 2, cols = 3, n = rows * cols;

  // reduce_max: elementwise maximum over the ranks, in place.
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = max_input(rank, i);
  oslo::Tensor tx = upload(ctx, x, {rows, cols});
  oslo::reduce_max(ctx, g, oslo::view(tx));
  std::vector<float> got = download(ctx, tx);
  for (int i = 0; i < n; ++i) {
    float want = max_input(0, i);
    for (int r = 1; r < world; ++r) want = std::max(want, max_input(r, i));
    check(got[i] == want, rank,
          "reduce_max[" + std::to_string(i) + "] = " + std::to_string(got[i]) + ", want " +
              std::to_string(want));
  }

  // gather_first_dim: [world * rows, cols], rank r's block at rows r * rows.
  std::vector<float> mine(n);
  for (int i = 0; i < n; ++i) mine[i] = gather_input(rank, i);
  oslo::Tensor tl = upload(ctx, mine, {rows, cols});
  oslo::Tensor tall = upload(ctx, std::vector<float>(n * world, -1.0f), {world * rows, cols});
  oslo::gather_first_dim(ctx, g, oslo::view(tl), oslo::view(tall));
  got = download(ctx, tall);
  for (int r = 0; r < world; ++r)
    for (int i = 0; i < n; ++i)
      check(got[r * n + i] == gather_input(r, i), rank,
            "gather_first_dim[" + std::to_string(r * n + i) + "] = " +
                std::to_string(got[r * n + i]) + ", want " + std::to_string(gather_input(r, i)));

  // reduce_scatter_first_dim: this rank's block of the sum of every full.
  std::vector<float> full(n * world);
  for (int j = 0; j < n * world; ++j) full[j] = scatter_input(rank, j);
  oslo::Tensor tf = upload(ctx, full, {world * rows, cols});
  oslo::Tensor tb = upload(ctx, std::vector<float>(n, -1.0f), {rows, cols});
  oslo::reduce_scatter_first_dim(ctx, g, oslo::view(tf), oslo::view(tb));
  got = download(ctx, tb);
  for (int i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < world; ++r) want += scatter_input(r, rank * n + i);
    check(got[i] == want, rank,
          "reduce_scatter_first_dim[" + std::to_string(i) + "] = " + std::to_string(got[i]) +
              ", want " + std::to_string(want));
  }

  // A block that does not divide: refused before any communication.
  oslo::Tensor odd = upload(ctx, std::vector<float>(n * world + 1, 0.0f), {n * world + 1});
  bool refused = false;
  try {
    oslo::gather_first_dim(ctx, g, oslo::view(tl), oslo::view(odd));
  } catch (const oslo::Error& e) {
    refused = e.status() == OSLO_ERR_INTERNAL;
  }
  check(refused, rank, "gather_first_dim into a wrong-sized output was not refused");
  oslo_context_destroy(h);
}

}  // namespace

int main(int argc, char** argv) {
  const int world = argc > 1 ? std::atoi(argv[1]) : 0;
  if (world < 1) {
    std::fprintf(stderr, "usage: %s WORLD\n", argv[0]);
    return 2;
  }
  char dir[] = "/tmp/oslo_mappings_XXXXXX";
  if (!mkdtemp(dir)) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string store = std::string(dir) + "/store";
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(run_rank, r, world, store);
  for (auto& t : ranks) t.join();
  std::string rm = std::string("rm -rf ") + dir;
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir);
  std::printf("mappings at world size %d: %s\n", world, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
