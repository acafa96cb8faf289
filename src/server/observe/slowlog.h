// SlowLog: the commands that took longer than slowlog-log-slower-than, as
// Redis keeps them (SLOWLOG GET/LEN/RESET).
//
// The hot path is wants(): one relaxed atomic load and a compare per
// command, with no lock and no clock read of its own (the connection passes
// the latency it measures anyway). Only a command that is slow enough takes
// the mutex, so I/O threads share nothing while commands are fast. Entries
// are copies: arguments are cut as Redis cuts them (32 arguments, 128 bytes
// each), so a slow 32 MiB SET costs 128 bytes in the log, not 32 MiB.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"

namespace tierkv::server {

struct SlowLogEntry {
  uint64_t id = 0;
  int64_t unix_time_s = 0;
  int64_t duration_us = 0;
  std::vector<std::string> argv;  // cut as Redis's slowlogCreateEntry cuts them
  std::string addr;               // the client's "ip:port"
  std::string name;               // the client's name, empty if none
};

class SlowLog {
 public:
  // Redis's SLOWLOG_ENTRY_MAX_ARGC and SLOWLOG_ENTRY_MAX_STRING.
  static constexpr size_t kMaxArgs = 32;
  static constexpr size_t kMaxArgBytes = 128;

  // slower_than_us < 0 logs nothing, 0 logs every command; the log keeps at
  // most max_len entries (a shorter limit drops the oldest at once).
  void configure(int64_t slower_than_us, int64_t max_len);

  // True if a command that took `ns` belongs in the log.
  bool wants(uint64_t ns) const { return ns >= threshold_ns_.load(std::memory_order_relaxed); }

  // Logs a command (the caller checked wants()). `redact` lists argument
  // indexes shown as "(redacted)" (passwords).
  void add(std::span<const std::string_view> argv, uint64_t ns, std::string_view addr,
           std::string_view name, std::span<const size_t> redact = {});

  // The newest `count` entries, newest first.
  std::vector<SlowLogEntry> newest(size_t count) const;
  size_t size() const;
  // Empties the log; ids go on counting, as in Redis.
  void reset();

 private:
  std::atomic<uint64_t> threshold_ns_{UINT64_MAX};
  mutable Mutex mu_;
  std::deque<SlowLogEntry> entries_ ABSL_GUARDED_BY(mu_);  // newest first
  size_t max_len_ ABSL_GUARDED_BY(mu_) = 128;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
};

// Redis's argument cut: arguments past the 31st become one "... (N more
// arguments)", and each longer than 128 bytes keeps 128 bytes and "... (N
// more bytes)".
std::vector<std::string> slowlog_arguments(std::span<const std::string_view> argv,
                                           std::span<const size_t> redact);

}  // namespace tierkv::server
