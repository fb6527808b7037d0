// test_gloo threads_*, processes_2..4: every op, dtype and reduce op on 2,
// 3 and 4 ranks with exact expected values, in-place variants, bitwise
// agreement across ranks, a large all_reduce.
#include "gloo_util.hpp"

namespace gloo_test {

constexpr oslo_dtype kDtypes[] = {OSLO_DTYPE_F32, OSLO_DTYPE_F16, OSLO_DTYPE_BF16, OSLO_DTYPE_I32,
                                  OSLO_DTYPE_I64};
constexpr oslo_reduce_op kOps[] = {OSLO_REDUCE_SUM, OSLO_REDUCE_AVG, OSLO_REDUCE_MAX,
                                   OSLO_REDUCE_MIN};
const size_t kSizes[] = {0, 1, 7, 4096};
constexpr size_t kLarge = (size_t(4) << 20) + 3;  // ~4M elements, not a multiple of n

// ---- values -------------------------------------------------------------------

// Small integers, so that every float sum is exact and the expected value is
// unambiguous; they differ per rank and element, with negatives, so MAX and
// MIN are exercised.
int64_t base_value(int rank, size_t i) {
  return static_cast<int64_t>((rank * 7 + static_cast<int64_t>(i % 1009) * 3) % 11) - 5 + rank;
}

int64_t int_scale(oslo_dtype dt) {
  return dt == OSLO_DTYPE_I64 ? 3000000007LL : 100000;
}

// Buffer of count elements of rank's input, in dtype dt.
std::vector<uint8_t> make_input(oslo_dtype dt, int rank, size_t count, size_t first = 0) {
  std::vector<uint8_t> b(count * oslo::dtype_size(dt) + 1);
  for (size_t i = 0; i < count; ++i) {
    int64_t v = base_value(rank, first + i);
    switch (dt) {
      case OSLO_DTYPE_I32:
        reinterpret_cast<int32_t*>(b.data())[i] = static_cast<int32_t>(v * int_scale(dt));
        break;
      case OSLO_DTYPE_I64: reinterpret_cast<int64_t*>(b.data())[i] = v * int_scale(dt); break;
      default: {
        float f = static_cast<float>(v);
        oslo::from_f32(dt, &f, b.data() + i * oslo::dtype_size(dt), 1);
      }
    }
  }
  b.resize(count * oslo::dtype_size(dt));
  return b;
}

// What the reduction of element i over n ranks must give, stored as dt.
std::vector<uint8_t> expected_reduce(oslo_dtype dt, oslo_reduce_op op, int n, size_t count,
                                     size_t first = 0) {
  std::vector<uint8_t> b(count * oslo::dtype_size(dt) + 1);
  for (size_t i = 0; i < count; ++i) {
    int64_t sum = 0, mx = INT64_MIN, mn = INT64_MAX;
    for (int r = 0; r < n; ++r) {
      int64_t v = base_value(r, first + i);
      sum += v;
      mx = std::max(mx, v);
      mn = std::min(mn, v);
    }
    if (dt == OSLO_DTYPE_I32 || dt == OSLO_DTYPE_I64) {
      int64_t s = int_scale(dt);
      int64_t r = op == OSLO_REDUCE_SUM   ? sum * s
                  : op == OSLO_REDUCE_AVG ? (sum * s) / n
                  : op == OSLO_REDUCE_MAX ? mx * s
                                          : mn * s;
      if (dt == OSLO_DTYPE_I32)
        reinterpret_cast<int32_t*>(b.data())[i] = static_cast<int32_t>(r);
      else
        reinterpret_cast<int64_t*>(b.data())[i] = r;
    } else {
      float f = op == OSLO_REDUCE_SUM   ? static_cast<float>(sum)
                : op == OSLO_REDUCE_AVG ? static_cast<float>(sum) / static_cast<float>(n)
                : op == OSLO_REDUCE_MAX ? static_cast<float>(mx)
                                        : static_cast<float>(mn);
      oslo::from_f32(dt, &f, b.data() + i * oslo::dtype_size(dt), 1);
    }
  }
  b.resize(count * oslo::dtype_size(dt));
  return b;
}

// Deterministic pseudo-random floats in [-1, 1): sums are not exact, so only
// a rank-ordered reduction reproduces them bit for bit.
float noise(int rank, size_t i) {
  uint64_t x = (static_cast<uint64_t>(rank) << 40) ^ (i * 0x9e3779b97f4a7c15ull);
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  return static_cast<float>(x % 2000001) / 1000000.0f - 1.0f;
}

// ---- the op matrix ------------------------------------------------------------

int check_all_reduce(Communicator& c, size_t count, oslo_dtype dt, oslo_reduce_op op) {
  int failures = 0;
  const int n = c.size(), r = c.rank();
  const size_t bytes = count * oslo::dtype_size(dt);
  auto in = make_input(dt, r, count);
  auto want = expected_reduce(dt, op, n, count);
  std::vector<uint8_t> out(bytes + 1, 0xcd);
  c.all_reduce(in.data(), out.data(), count, dt, op);
  CHECK(same(want, out.data(), bytes), "all_reduce %s op %d count %zu", oslo::dtype_name(dt), op,
        count);
  CHECK(out[bytes] == 0xcd, "all_reduce wrote past the end");
  CHECK(same(make_input(dt, r, count), in.data(), bytes), "all_reduce changed its input");
  c.all_reduce(in.data(), in.data(), count, dt, op);  // in place
  CHECK(same(want, in.data(), bytes), "in-place all_reduce %s op %d count %zu",
        oslo::dtype_name(dt), op, count);
  return failures;
}

int check_reduce_scatter(Communicator& c, size_t count, oslo_dtype dt, oslo_reduce_op op) {
  int failures = 0;
  const int n = c.size(), r = c.rank();
  const size_t es = oslo::dtype_size(dt);
  auto in = make_input(dt, r, count * n);
  auto want = expected_reduce(dt, op, n, count, static_cast<size_t>(r) * count);
  std::vector<uint8_t> out(count * es + 1, 0xcd);
  c.reduce_scatter(in.data(), out.data(), count, dt, op);
  CHECK(same(want, out.data(), count * es), "reduce_scatter %s op %d count %zu",
        oslo::dtype_name(dt), op, count);
  CHECK(out[count * es] == 0xcd, "reduce_scatter wrote past the end");
  // In place: the result lands in this rank's own block of the input.
  uint8_t* mine = in.data() + static_cast<size_t>(r) * count * es;
  c.reduce_scatter(in.data(), mine, count, dt, op);
  CHECK(same(want, mine, count * es), "in-place reduce_scatter %s op %d count %zu",
        oslo::dtype_name(dt), op, count);
  return failures;
}

int check_all_gather(Communicator& c, size_t count, oslo_dtype dt) {
  int failures = 0;
  const int n = c.size(), r = c.rank();
  const size_t es = oslo::dtype_size(dt);
  std::vector<uint8_t> want;
  for (int p = 0; p < n; ++p) {
    auto part = make_input(dt, p, count);
    want.insert(want.end(), part.begin(), part.end());
  }
  auto in = make_input(dt, r, count);
  std::vector<uint8_t> out(count * es * n + 1, 0xcd);
  c.all_gather(in.data(), out.data(), count, dt);
  CHECK(same(want, out.data(), count * es * n), "all_gather %s count %zu", oslo::dtype_name(dt),
        count);
  CHECK(out[count * es * n] == 0xcd, "all_gather wrote past the end");
  // In place: the input already sits in this rank's block of the output.
  std::vector<uint8_t> io(count * es * n, 0);
  if (count) std::memcpy(io.data() + static_cast<size_t>(r) * count * es, in.data(), count * es);
  c.all_gather(io.data() + static_cast<size_t>(r) * count * es, io.data(), count, dt);
  CHECK(same(want, io.data(), count * es * n), "in-place all_gather %s count %zu",
        oslo::dtype_name(dt), count);
  return failures;
}

int check_broadcast(Communicator& c, size_t count, oslo_dtype dt) {
  int failures = 0;
  const size_t bytes = count * oslo::dtype_size(dt);
  for (int root = 0; root < c.size(); ++root) {
    auto want = make_input(dt, root + 10, count);
    auto buf = c.rank() == root ? want : std::vector<uint8_t>(bytes, 0);
    c.broadcast(buf.data(), count, dt, root);
    CHECK(same(want, buf.data(), bytes), "broadcast %s count %zu root %d", oslo::dtype_name(dt),
          count, root);
  }
  return failures;
}

int check_send_recv(Communicator& c) {
  int failures = 0;
  const int n = c.size(), r = c.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // A ring of messages of several sizes (0 bytes included), each sent in
  // order; even ranks send first, odd ranks receive first, so that the
  // synchronous sends of the ring never wait on each other in a cycle.
  const size_t sizes[] = {0, 1, 13, 1 << 20};
  auto payload = [](int from, size_t len) {
    std::vector<uint8_t> v(len);
    for (size_t i = 0; i < len; ++i) v[i] = static_cast<uint8_t>(from * 31 + i * 7);
    return v;
  };
  auto do_sends = [&] {
    for (size_t len : sizes) {
      auto v = payload(r, len);
      c.send(v.data(), v.size(), next);
    }
  };
  auto do_recvs = [&] {
    for (size_t len : sizes) {
      std::vector<uint8_t> v(len, 0);
      c.recv(v.data(), v.size(), prev);
      CHECK(v == payload(prev, len), "recv of %zu bytes from %d", len, prev);
    }
  };
  if (r % 2 == 0) {
    do_sends();
    do_recvs();
  } else {
    do_recvs();
    do_sends();
  }
  // Buffered sends: ranks 0 and 1 both send many messages to each other
  // before either receives (each message is copied and send() returns).
  if (r < 2) {
    const int peer = 1 - r;
    const int kMsgs = 300;
    auto msg = [&](int from, int m) { return payload(from * 1000 + m, (m * 37) % 2000); };
    for (int m = 0; m < kMsgs; ++m) {
      auto v = msg(r, m);
      c.send(v.data(), v.size(), peer);
    }
    for (int m = 0; m < kMsgs; ++m) {
      auto want = msg(peer, m);
      std::vector<uint8_t> v(want.size());
      c.recv(v.data(), v.size(), peer);
      CHECK(v == want, "buffered message %d from %d", m, peer);
    }
    // Large messages (sent from the caller's buffer, send() waits for the
    // receiver) in order with small ones queued before and after them.
    const size_t big = (size_t(5) << 20) + 1;
    for (int m = 0; m < 6; ++m) {
      size_t len = m % 2 ? static_cast<size_t>(m * 101) : big + static_cast<size_t>(m);
      auto want = payload(m + 7, len);
      if (r == 0) {
        c.send(want.data(), want.size(), 1);
      } else {
        std::vector<uint8_t> v(len);
        c.recv(v.data(), v.size(), 0);
        CHECK(v == want, "streamed message %d", m);
      }
    }
  }
  return failures;
}

int check_bitwise_agreement(Communicator& c) {
  int failures = 0;
  const int n = c.size(), r = c.rank();
  const size_t count = 100003;
  std::vector<float> in(count), out(count), want(count, 0.0f);
  for (size_t i = 0; i < count; ++i) in[i] = noise(r, i);
  // Reference: sum in rank order 0..n-1 in f32.
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i) want[i] = p == 0 ? noise(0, i) : want[i] + noise(p, i);
  c.all_reduce(in.data(), out.data(), count, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
  CHECK(std::memcmp(want.data(), out.data(), count * 4) == 0, "f32 sum not rank-ordered");
  // Every rank holds the same bits: gather everybody's result and compare.
  std::vector<float> all(count * n);
  c.all_gather(out.data(), all.data(), count, OSLO_DTYPE_F32);
  for (int p = 0; p < n; ++p)
    CHECK(std::memcmp(all.data() + p * count, out.data(), count * 4) == 0,
          "rank %d's result differs", p);
  // bf16 in f32, rounded once.
  std::vector<uint16_t> bin(count), bout(count), bwant(count);
  for (size_t i = 0; i < count; ++i) bin[i] = oslo::f32_to_bf16(noise(r, i));
  std::vector<float> acc(count, 0.0f);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i) {
      float v = oslo::bf16_to_f32(oslo::f32_to_bf16(noise(p, i)));
      acc[i] = p == 0 ? v : acc[i] + v;
    }
  for (size_t i = 0; i < count; ++i) bwant[i] = oslo::f32_to_bf16(acc[i] / static_cast<float>(n));
  c.all_reduce(bin.data(), bout.data(), count, OSLO_DTYPE_BF16, OSLO_REDUCE_AVG);
  CHECK(bwant == bout, "bf16 avg differs from f32 accumulation rounded once");
  return failures;
}

int check_large(Communicator& c) {
  int failures = 0;
  failures += check_all_reduce(c, kLarge, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
  failures += check_all_reduce(c, kLarge, OSLO_DTYPE_BF16, OSLO_REDUCE_AVG);
  failures += check_all_gather(c, kLarge / c.size(), OSLO_DTYPE_F32);
  failures += check_reduce_scatter(c, kLarge / c.size(), OSLO_DTYPE_I64, OSLO_REDUCE_MAX);
  failures += check_broadcast(c, kLarge / 4, OSLO_DTYPE_F16);
  return failures;
}

// The whole matrix on one communicator; returns the number of failures.
// large: also the ~4M-element cases (costly under sanitizers, so only some
// of the rank counts run them).
int run_all_ops(Communicator& c, bool large) {
  int failures = 0;
  CHECK(std::strcmp(c.transport(), "gloo/tcp") == 0, "transport %s", c.transport());
  for (oslo_dtype dt : kDtypes)
    for (size_t count : kSizes) {
      for (oslo_reduce_op op : kOps) {
        failures += check_all_reduce(c, count, dt, op);
        failures += check_reduce_scatter(c, count, dt, op);
      }
      failures += check_all_gather(c, count, dt);
      failures += check_broadcast(c, count, dt);
    }
  failures += check_send_recv(c);
  c.barrier();
  failures += check_bitwise_agreement(c);
  if (large) failures += check_large(c);
  c.barrier();
  // Argument errors are reported without breaking the communicator.
  float x = 0;
  CHECK(
      status_of([&] { c.broadcast(&x, 1, OSLO_DTYPE_F32, c.size()); }) == OSLO_ERR_INVALID_ARGUMENT,
      "bad root");
  CHECK(status_of([&] { c.send(&x, 4, c.rank()); }) == OSLO_ERR_INVALID_ARGUMENT, "send to self");
  CHECK(status_of([&] { c.all_reduce(&x, &x, 1, static_cast<oslo_dtype>(7), OSLO_REDUCE_SUM); }) ==
            OSLO_ERR_DTYPE,
        "bad dtype");
  c.barrier();
  return failures;
}

// ---- tests ------------------------------------------------------------------------

void test_threads_2(void**) {
  const bool large = false;
  assert_int_equal(
      run_threads(2, 20, [=](Communicator& c, TcpStore&) { return run_all_ops(c, large); }), 0);
}
void test_threads_3(void**) {
  const bool large = true;
  assert_int_equal(
      run_threads(3, 20, [=](Communicator& c, TcpStore&) { return run_all_ops(c, large); }), 0);
}
void test_threads_4(void**) {
  const bool large = false;
  assert_int_equal(
      run_threads(4, 20, [=](Communicator& c, TcpStore&) { return run_all_ops(c, large); }), 0);
}
void test_processes_2(void**) {
  const bool large = false;
  assert_int_equal(
      run_processes(2, 20, [=](Communicator& c, TcpStore&) { return run_all_ops(c, large); }), 0);
}
void test_processes_3(void**) {
  const bool large = false;
  assert_int_equal(
      run_processes(3, 20, [=](Communicator& c, TcpStore&) { return run_all_ops(c, large); }), 0);
}
void test_processes_4(void**) {
  const bool large = true;
  assert_int_equal(
      run_processes(4, 20, [=](Communicator& c, TcpStore&) { return run_all_ops(c, large); }), 0);
}

}  // namespace gloo_test
