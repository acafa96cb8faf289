#include "store/flashio/buffer_budget.h"

#include <absl/container/inlined_vector.h>

namespace tierkv {

BufferBudget::BufferBudget(int64_t limit, Metrics metrics) : limit_(limit), metrics_(metrics) {
  metrics_.limit.set(limit);
}

bool BufferBudget::acquire(int64_t bytes, std::function<void()> granted) {
  std::lock_guard lock(mu_);
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
  std::lock_guard lock(mu_);
  used_ += bytes;
  metrics_.used.set(used_);
}

void BufferBudget::release(int64_t bytes) {
  if (bytes == 0) return;
  std::unique_lock lock(mu_);
  used_ -= bytes;
  metrics_.used.set(used_);
  grant_waiters(lock);
}

void BufferBudget::set_limit(int64_t limit) {
  std::unique_lock lock(mu_);
  limit_ = limit;
  metrics_.limit.set(limit);
  grant_waiters(lock);
}

void BufferBudget::grant_waiters(std::unique_lock<std::mutex>& lock) {
  absl::InlinedVector<std::function<void()>, 2> run;
  while (!waiters_.empty() && used_ + waiters_.front().bytes <= limit_) {
    used_ += waiters_.front().bytes;
    run.push_back(std::move(waiters_.front().granted));
    waiters_.pop_front();
  }
  metrics_.used.set(used_);
  lock.unlock();
  for (auto& fn : run) fn();
}

}  // namespace tierkv
