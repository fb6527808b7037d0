#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include "core/context/context.hpp"
#include "core/model/model.hpp"
using namespace oslo;
int main(int argc, char** argv) {
  int threads = atoi(argv[2]); int dtype = argc > 3 ? atoi(argv[3]) : -1;
  Context ctx(Config::parse(str("{\"rank\":0,\"world_size\":1,\"init_method\":\"file:///tmp/dev/qb/rdv", getpid(), "\",\"num_threads\":", threads, "}").c_str()));
  ModelLoadOptions o; o.dtype = dtype;
  auto t0 = std::chrono::steady_clock::now();
  auto m = Model::load(ctx, argv[1], o);
  auto t1 = std::chrono::steady_clock::now();
  printf("load %.2fs\n", std::chrono::duration<double>(t1 - t0).count());
  std::vector<int64_t> prompt(512); for (auto& p : prompt) p = rand() % 50000;
  m->reset(1, 512 + 8);
  t0 = std::chrono::steady_clock::now();
  m->append(prompt, 512, std::vector<uint8_t>(512, 1));
  t1 = std::chrono::steady_clock::now();
  printf("prefill 512: %.1f tok/s\n", 512 / std::chrono::duration<double>(t1 - t0).count());
  prompt.resize(32); m->reset(1, 32 + 130);
  auto lg = m->append(prompt, 32, std::vector<uint8_t>(32, 1));
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 64; ++i) { std::vector<int64_t> t{i}; lg = m->append(t, 1, std::vector<uint8_t>(33 + i, 1)); }
  t1 = std::chrono::steady_clock::now();
  printf("decode: %.1f tok/s\n", 64 / std::chrono::duration<double>(t1 - t0).count());
}
