#include "store/flashio/buffer_budget.h"

#include <absl/container/inlined_vector.h>

namespace tierkv {

BufferBudget::BufferBudget(int64_t limit, Metrics metrics) : limit_(limit), metrics_(metrics) {
  metrics_.limit.set(limit);
}

bool BufferBudget::acquire(int64_t bytes, std::function<void()> granted) {
  MutexLock lock(mu_);
  if (waiters_.empty() && used_ + bytes <= limit_) {
    used_ += bytes;
    metrics_.used.set(used_);
    return true;
  }
  metrics_.waits.add();
  waiters_.push_back(Waiter{bytes, std::move(granted)});
  return false;
}

void BufferBudget::take(int64_t bytes) {
  MutexLock lock(mu_);
  used_ += bytes;
  metrics_.used.set(used_);
}

void BufferBudget::release(int64_t bytes) {
  if (bytes == 0) return;
  absl::InlinedVector<std::function<void()>, 2> granted;
  {
    MutexLock lock(mu_);
    used_ -= bytes;
    metrics_.used.set(used_);
    granted = take_granted_locked();
  }
  for (auto& fn : granted) fn();
}

void BufferBudget::set_limit(int64_t limit) {
  absl::InlinedVector<std::function<void()>, 2> granted;
  {
    MutexLock lock(mu_);
    limit_ = limit;
    metrics_.limit.set(limit);
    granted = take_granted_locked();
  }
  for (auto& fn : granted) fn();
}

absl::InlinedVector<std::function<void()>, 2> BufferBudget::take_granted_locked() {
  absl::InlinedVector<std::function<void()>, 2> run;
  while (!waiters_.empty() && used_ + waiters_.front().bytes <= limit_) {
    used_ += waiters_.front().bytes;
    run.push_back(std::move(waiters_.front().granted));
    waiters_.pop_front();
  }
  metrics_.used.set(used_);
  return run;
}

}  // namespace tierkv
