#include "server/acl/acl_log.h"

namespace tierkv::server {
namespace {

constexpr int64_t kGroupingMs = 60'000;  // Redis's ACL_LOG_GROUPING_MAX_TIME_DELTA

bool same(const AclDenial& a, const AclDenial& b) {
  return a.reason == b.reason && a.context == b.context && a.object == b.object &&
         a.username == b.username;
}

}  // namespace

void AclLog::add(AclDenial denial, int64_t now_ms, size_t max_len) {
  MutexLock lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (now_ms - it->updated_ms >= kGroupingMs || !same(it->denial, denial)) continue;
    AclLogEntry entry = std::move(*it);
    entries_.erase(it);
    ++entry.count;
    entry.updated_ms = now_ms;
    entry.denial.client_info = std::move(denial.client_info);
    entries_.push_front(std::move(entry));
    return;
  }
  entries_.push_front({std::move(denial), 1, now_ms, now_ms});
  while (entries_.size() > max_len) entries_.pop_back();
}

std::vector<AclLogEntry> AclLog::newest(int64_t count) const {
  MutexLock lock(mu_);
  const size_t n =
      count < 0 ? entries_.size() : std::min(entries_.size(), static_cast<size_t>(count));
  return {entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(n)};
}

void AclLog::reset() {
  MutexLock lock(mu_);
  entries_.clear();
}

void AclLog::trim(size_t max_len) {
  MutexLock lock(mu_);
  while (entries_.size() > max_len) entries_.pop_back();
}

}  // namespace tierkv::server
