// The progress line the server prints while it writes, and the numbers of a
// finished transfer (also written as one JSON line per transfer).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace tutorial {

using Clock = std::chrono::steady_clock;

// Final numbers of one transfer, as the series reports them.
struct TransferStats {
  double seconds = 0;
  uint64_t ops = 0;
  uint64_t bytes = 0;
  double gbps = 0;
  double mops = 0;
  double link_share = 0;  // of the summed link speed, 0 when that is unknown

  static TransferStats Of(double seconds, uint64_t ops, uint64_t op_bytes, double link_gbps);
};

// Safe to call from several threads (chapters 11 on): a mutex guards the
// clock and the terminal, and Print() is rare enough not to contend.
class ProgressLine {
 public:
  // `link_gbps`: summed link speed of the NICs in use, 0 when unknown.
  ProgressLine(uint64_t total_ops, uint64_t op_bytes, double link_gbps);

  // Starts the clock (after warmup, so connection set-up is not timed).
  void Start();

  // One line: elapsed time, ops finished/total, ops posted, bytes, Gbps,
  // share of the link speed, Mops/s. On a terminal it rewrites itself in
  // place; into a file or pipe it prints at most once a second.
  void Print(Clock::time_point now, uint64_t posted, uint64_t finished);
  // The last line, always printed, ending with a newline.
  TransferStats Finish(Clock::time_point now, uint64_t finished);

 private:
  std::string Format(double seconds, uint64_t posted, uint64_t finished) const;

  std::mutex mutex_;
  uint64_t total_ops_;
  uint64_t op_bytes_;
  double link_gbps_;
  bool tty_;
  Clock::time_point start_;
  Clock::time_point last_print_;
};

// "1.50 GiB", "12.0 MiB", "512 B"
std::string FormatBytes(uint64_t bytes);

// A rate with three significant digits and no exponent ("0.7800" -> "0.78",
// "0.001234", "3200"): a simulated 0.78 Gbps link is not "1 Gbps", and a
// slow run's Mops/s is not "0.001".
std::string FormatRate(double value);

}  // namespace tutorial
