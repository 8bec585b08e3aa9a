#include "common/progress.h"

#include <unistd.h>

#include <cstdio>

namespace tutorial {

TransferStats TransferStats::Of(double seconds, uint64_t ops, uint64_t op_bytes, double link_gbps) {
  TransferStats s;
  s.seconds = seconds;
  s.ops = ops;
  s.bytes = ops * op_bytes;
  if (seconds > 0) {
    s.gbps = static_cast<double>(s.bytes) * 8 / seconds / 1e9;
    s.mops = static_cast<double>(ops) / seconds / 1e6;
  }
  s.link_share = link_gbps > 0 ? s.gbps / link_gbps : 0;
  return s;
}

std::string FormatBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
  return text;
}

std::string FormatRate(double value) {
  int decimals = 0;
  for (double v = value; v > 0 && v < 1000 && decimals < 9; v *= 10) ++decimals;
  decimals = decimals > 0 ? decimals - 1 : 0;  // three significant digits
  char text[48];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  std::string s = text;
  if (s.find('.') != std::string::npos) {
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

ProgressLine::ProgressLine(uint64_t total_ops, uint64_t op_bytes, double link_gbps)
    : total_ops_(total_ops), op_bytes_(op_bytes), link_gbps_(link_gbps), tty_(isatty(1) != 0) {
  Start();
}

void ProgressLine::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  start_ = last_print_ = Clock::now();
}

std::string ProgressLine::Format(double seconds, uint64_t posted, uint64_t finished) const {
  TransferStats s = TransferStats::Of(seconds, finished, op_bytes_, link_gbps_);
  char share[48] = "link speed unknown";
  if (link_gbps_ > 0) {
    std::snprintf(share, sizeof(share), "%.1f%% of %s Gbps", 100 * s.link_share,
                  FormatRate(link_gbps_).c_str());
  }
  char line[256];
  std::snprintf(
      line, sizeof(line), "[%8.3fs] ops %llu/%llu, posted %llu | %s | %.3f Gbps | %s | %s Mops/s",
      seconds, static_cast<unsigned long long>(finished),
      static_cast<unsigned long long>(total_ops_), static_cast<unsigned long long>(posted),
      FormatBytes(s.bytes).c_str(), s.gbps, share, FormatRate(s.mops).c_str());
  return line;
}

void ProgressLine::Print(Clock::time_point now, uint64_t posted, uint64_t finished) {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread is printing right now
  auto since_last = std::chrono::duration<double>(now - last_print_).count();
  if (since_last < (tty_ ? 0.1 : 1.0)) return;
  last_print_ = now;
  double seconds = std::chrono::duration<double>(now - start_).count();
  std::printf(tty_ ? "\r%s\033[K" : "%s\n", Format(seconds, posted, finished).c_str());
  std::fflush(stdout);
}

TransferStats ProgressLine::Finish(Clock::time_point now, uint64_t finished) {
  std::lock_guard<std::mutex> lock(mutex_);
  double seconds = std::chrono::duration<double>(now - start_).count();
  std::printf(tty_ ? "\r%s\033[K\n" : "%s\n", Format(seconds, finished, finished).c_str());
  std::fflush(stdout);
  return TransferStats::Of(seconds, finished, op_bytes_, link_gbps_);
}

}  // namespace tutorial
