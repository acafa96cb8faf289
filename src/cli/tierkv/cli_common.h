// What the tierkv CLI's commands share: the one-line failure, byte counts
// for people, and the progress line (a bar redrawn in place on a terminal,
// one line every few seconds otherwise).
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

namespace tierkv::cli {

// Set by Ctrl-C: a command that waits stops waiting.
inline std::atomic<bool> interrupted{false};

inline int fail(const std::string& message, int code) {
  std::fprintf(stderr, "tierkv: %s\n", message.c_str());
  return code;
}

inline std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt::format("{:.{}f} {}", b, u == 0 ? 0 : 2, units[u]);
}

class ProgressLine {
 public:
  explicit ProgressLine(bool quiet) : quiet_(quiet), tty_(::isatty(STDERR_FILENO) != 0) {}
  ~ProgressLine() { finish(); }
  // Ends the line being redrawn (before a message of its own).
  void finish() {
    if (shown_ && tty_) std::fputc('\n', stderr);
    shown_ = false;
  }
  // Shows `done` of `total` and `detail`, unless shown too recently
  // (`force`: the last one).
  void show(double done, double total, const std::string& detail, bool force = false) {
    const auto now = std::chrono::steady_clock::now();
    const auto every = tty_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(2000);
    if (quiet_ || (!force && shown_ && now - last_ < every)) return;
    const double pct = total > 0 ? 100.0 * std::min(done, total) / total : 100.0;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(pct / 100 * kWidth);
    std::fprintf(stderr, "%s[%s%s] %5.1f%%  %s   %s", tty_ ? "\r" : "",
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), pct,
                 detail.c_str(), tty_ ? "" : "\n");
    std::fflush(stderr);
    last_ = now;
    shown_ = true;
  }

 private:
  const bool quiet_, tty_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace tierkv::cli
