#include "server/observe/slowlog.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace tierkv::server {

std::vector<std::string> slowlog_arguments(std::span<const std::string_view> argv,
                                           std::span<const size_t> redact) {
  size_t kept = std::min(argv.size(), SlowLog::kMaxArgs);
  std::vector<std::string> out;
  out.reserve(kept);
  for (size_t i = 0; i < kept; ++i) {
    if (kept != argv.size() && i == kept - 1) {
      out.push_back(fmt::format("... ({} more arguments)", argv.size() - kept + 1));
    } else if (std::find(redact.begin(), redact.end(), i) != redact.end()) {
      out.emplace_back("(redacted)");
    } else if (argv[i].size() > SlowLog::kMaxArgBytes) {
      out.push_back(fmt::format("{}... ({} more bytes)", argv[i].substr(0, SlowLog::kMaxArgBytes),
                                argv[i].size() - SlowLog::kMaxArgBytes));
    } else {
      out.emplace_back(argv[i]);
    }
  }
  return out;
}

void SlowLog::configure(int64_t slower_than_us, int64_t max_len) {
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  uint64_t ns = kNever;
  if (slower_than_us >= 0 && static_cast<uint64_t>(slower_than_us) < kNever / 1000)
    ns = static_cast<uint64_t>(slower_than_us) * 1000;
  threshold_ns_.store(ns, std::memory_order_relaxed);
  MutexLock lock(mu_);
  max_len_ = static_cast<size_t>(std::max<int64_t>(max_len, 0));
  if (entries_.size() > max_len_) entries_.resize(max_len_);
}

void SlowLog::add(std::span<const std::string_view> argv, uint64_t ns, std::string_view addr,
                  std::string_view name, std::span<const size_t> redact) {
  // Built outside the lock: other threads logging wait only for the insert.
  SlowLogEntry e;
  e.unix_time_s = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  e.duration_us = static_cast<int64_t>(ns / 1000);
  e.argv = slowlog_arguments(argv, redact);
  e.addr = std::string(addr);
  e.name = std::string(name);
  MutexLock lock(mu_);
  e.id = next_id_++;
  entries_.push_front(std::move(e));
  while (entries_.size() > max_len_) entries_.pop_back();
}

std::vector<SlowLogEntry> SlowLog::newest(size_t count) const {
  MutexLock lock(mu_);
  size_t n = std::min(count, entries_.size());
  return {entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(n)};
}

size_t SlowLog::size() const {
  MutexLock lock(mu_);
  return entries_.size();
}

void SlowLog::reset() {
  MutexLock lock(mu_);
  entries_.clear();
}

}  // namespace tierkv::server
