// A point in time after which a blocking call gives up. Every blocking call in
// oslo takes one, so that a dead or frozen peer turns into OSLO_ERR_TIMEOUT
// instead of a hang.
#pragma once

#include <chrono>

namespace oslo {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Deadline(double seconds)
      : end_(Clock::now() +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))) {}
  static Deadline after(double seconds) { return Deadline(seconds); }

  bool expired() const { return Clock::now() >= end_; }
  // Seconds left, never negative.
  double remaining() const {
    double s = std::chrono::duration<double>(end_ - Clock::now()).count();
    return s > 0 ? s : 0;
  }
  Clock::time_point time_point() const { return end_; }

 private:
  Clock::time_point end_;
};

}  // namespace oslo
