// A process group as a transport or backend needs to know it to connect its
// members.
#pragma once

#include <string>
#include <vector>

namespace oslo {

struct GroupSpec {
  std::string name;  // unique within the job, e.g. "tensor.1"
  int rank = 0;      // this rank's index in the group
  int size = 1;
  std::vector<int> members;  // global ranks, in group-rank order
  bool same_host = true;     // all members share one host (shared memory possible)
  double timeout_seconds = 300;
  std::string local_address;  // address peers on other hosts can reach
};

}  // namespace oslo
