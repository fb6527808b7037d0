// A point in time after which a blocking call gives up. Every blocking call in
// oslo takes one, so that a dead or frozen peer turns into OSLO_ERR_TIMEOUT
// instead of a hang.
#pragma once

#include <chrono>

namespace oslo {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  // Longest wait a Deadline represents (about 31 years): longer ones, and
  // infinity, saturate to it. Clock::duration counts nanoseconds in 64 bits
  // (about 292 years), so now() + kMaxSeconds and a few seconds of grace
  // added by callers never overflow. NaN and values <= 0 mean "now".
  static constexpr double kMaxSeconds = 1e9;

  explicit Deadline(double seconds) : end_(Clock::now() + duration_of(seconds)) {}
  static Deadline after(double seconds) { return Deadline(seconds); }

  bool expired() const { return Clock::now() >= end_; }
  // Seconds left, never negative.
  double remaining() const {
    double s = std::chrono::duration<double>(end_ - Clock::now()).count();
    return s > 0 ? s : 0;
  }
  Clock::time_point time_point() const { return end_; }

 private:
  static Clock::duration duration_of(double seconds) {
    if (!(seconds > 0)) return Clock::duration::zero();  // also NaN
    if (seconds > kMaxSeconds) seconds = kMaxSeconds;    // also +inf
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }

  Clock::time_point end_;
};

}  // namespace oslo
