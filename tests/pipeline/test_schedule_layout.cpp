// pipeline_schedule_test partition, peers: how blocks are cut into stages,
// and whom each op receives from and sends to.
#include "schedule_common.hpp"

using namespace oslo;

namespace sched_test {

// ------------------------------------------------------------ partition

std::string ranges(const PipelinePartition& part) {
  std::string s;
  for (const LayerRange& r : part.stages)
    s += (s.empty() ? "" : " ") + std::to_string(r.begin) + "-" + std::to_string(r.end);
  return s;
}

void test_partition() {
  // Expected: Colossal-AI's partition_uniform(L, p, v) run on these
  // arguments (its [(begin, end)] per rank, per chunk), rewritten by
  // virtual stage chunk * p + rank as "begin-end".
  struct Case {
    int layers, p, v;
    const char* want;
  };
  const Case cases[] = {
      {12, 4, 1, "0-3 3-6 6-9 9-12"},
      {10, 4, 1, "0-2 2-4 4-7 7-10"},  // remainder 2: the last two ranks
      {7, 3, 1, "0-2 2-4 4-7"},
      {16, 2, 2, "0-4 4-8 8-12 12-16"},
      {24, 4, 2, "0-3 3-6 6-9 9-12 12-15 15-18 18-21 21-24"},
      {22, 4, 2, "0-2 2-5 5-8 8-11 11-13 13-16 16-19 19-22"},  // 11 per chunk
      {9, 2, 3, "0-1 1-3 3-4 4-6 6-7 7-9"},
      {5, 1, 1, "0-5"},
      {8, 8, 1, "0-1 1-2 2-3 3-4 4-5 5-6 6-7 7-8"},
  };
  for (const Case& c : cases) {
    const PipelinePartition part = partition_uniform(c.layers, c.p, c.v);
    const std::string got = ranges(part);
    EXPECT(got == c.want, "uniform %d over p=%d v=%d: %s, want %s", c.layers, c.p, c.v, got.c_str(),
           c.want);
    EXPECT(part.pipeline_size == c.p && part.chunks == c.v && part.num_layers() == c.layers,
           "uniform %d over p=%d v=%d: shape %d x %d, %d layers", c.layers, c.p, c.v,
           part.pipeline_size, part.chunks, part.num_layers());
  }
  // Rank 1 of p = 2, v = 2 over 16 layers: chunks 4-8 and 12-16.
  const PipelinePartition p16 = partition_uniform(16, 2, 2);
  EXPECT(p16.at(1, 0).begin == 4 && p16.at(1, 0).end == 8 && p16.at(1, 1).begin == 12 &&
             p16.at(1, 1).end == 16 && p16.at(0, 1).size() == 4,
         "16 over p=2 v=2: rank 1 holds %d-%d and %d-%d", p16.at(1, 0).begin, p16.at(1, 0).end,
         p16.at(1, 1).begin, p16.at(1, 1).end);

  const PipelinePartition expl = partition_counts(10, 2, 2, {1, 4, 3, 2});
  EXPECT(ranges(expl) == "0-1 1-5 5-8 8-10" && expl.at(0, 1).begin == 5 && expl.at(1, 1).end == 10,
         "explicit 1 4 3 2: %s", ranges(expl).c_str());

  EXPECT(is_first_stage(0, 0) && !is_first_stage(0, 1) && !is_first_stage(1, 0), "is_first_stage");
  EXPECT(is_last_stage(3, 1, 4, 2) && !is_last_stage(3, 0, 4, 2) && !is_last_stage(2, 1, 4, 2) &&
             is_last_stage(0, 0, 1, 1) && is_first_stage(0, 0),
         "is_last_stage");
  EXPECT(virtual_stage(3, 1, 4) == 7 && virtual_stage(0, 1, 4) == 4, "virtual_stage");
}

// ---------------------------------------------------------------- peers

void test_peers() {
  const int p = 4, v = 2;
  struct Case {
    PipeOp::Kind kind;
    int rank, chunk, recv, send;
    const char* what;
  };
  const Case cases[] = {
      {PipeOp::FORWARD, 0, 0, -1, 1, "stage 0 forward: input from the data"},
      {PipeOp::FORWARD, 3, 0, 2, 0, "stage 3 forward: sends to rank 0 chunk 1"},
      {PipeOp::FORWARD, 0, 1, 3, 1, "stage 4 forward: from rank 3 chunk 0"},
      {PipeOp::FORWARD, 3, 1, 2, -1, "stage 7 forward: the loss, nothing sent"},
      {PipeOp::BACKWARD, 3, 1, -1, 2, "stage 7 backward: from its own loss"},
      {PipeOp::BACKWARD, 0, 1, 1, 3, "stage 4 backward: gradient to rank 3 chunk 0"},
      {PipeOp::BACKWARD, 3, 0, 0, 2, "stage 3 backward: gradient from rank 0 chunk 1"},
      {PipeOp::BACKWARD, 0, 0, 1, -1, "stage 0 backward: nothing to send"},
      {PipeOp::FORWARD, 1, 0, 0, 2, "stage 1 forward"},
  };
  for (const Case& c : cases) {
    const PipePeers got = pipe_op_peers({c.kind, 0, c.chunk}, c.rank, p, v);
    EXPECT(got.recv_from == c.recv && got.send_to == c.send, "%s: recv %d send %d, want %d %d",
           c.what, got.recv_from, got.send_to, c.recv, c.send);
  }
  // p = 1: the peers of the middle stages are the rank itself.
  const PipePeers one = pipe_op_peers({PipeOp::FORWARD, 0, 1}, 0, 1, 3);
  EXPECT(one.recv_from == 0 && one.send_to == 0, "p=1 v=3 chunk 1: recv %d send %d", one.recv_from,
         one.send_to);
  const PipePeers single = pipe_op_peers({PipeOp::BACKWARD, 0, 0}, 0, 1, 1);
  EXPECT(single.recv_from == -1 && single.send_to == -1, "p=1 v=1: recv %d send %d",
         single.recv_from, single.send_to);
  // Every activation sent by stage s is received by stage s + 1 from s's
  // rank, every gradient the same way back.
  for (int pp = 1; pp <= 4; ++pp)
    for (int vv = 1; vv <= 3; ++vv)
      for (int s = 0; s + 1 < pp * vv; ++s) {
        const int r = s % pp, c = s / pp, r2 = (s + 1) % pp, c2 = (s + 1) / pp;
        const PipePeers f = pipe_op_peers({PipeOp::FORWARD, 0, c}, r, pp, vv);
        const PipePeers f2 = pipe_op_peers({PipeOp::FORWARD, 0, c2}, r2, pp, vv);
        const PipePeers b = pipe_op_peers({PipeOp::BACKWARD, 0, c}, r, pp, vv);
        const PipePeers b2 = pipe_op_peers({PipeOp::BACKWARD, 0, c2}, r2, pp, vv);
        EXPECT(f.send_to == r2 && f2.recv_from == r && b2.send_to == r && b.recv_from == r2,
               "p=%d v=%d stages %d -> %d: F send %d recv %d, B send %d recv %d", pp, vv, s, s + 1,
               f.send_to, f2.recv_from, b2.send_to, b.recv_from);
      }
}

}  // namespace sched_test
