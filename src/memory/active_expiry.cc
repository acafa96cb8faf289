#include "memory/active_expiry.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/clock.h"

namespace tierkv::memory {

void ActiveExpiry::start(int hz) {
  {
    MutexLock lock(mu_);
    hz_ = std::max(hz, 0);
    stop_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

void ActiveExpiry::stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ActiveExpiry::request_trim() {
  {
    MutexLock lock(mu_);
    trim_requested_ = true;
  }
  cv_.notify_one();
}

void ActiveExpiry::run() {
  MutexLock lock(mu_);
  int64_t last_check_ms = 0, last_pool_release_ms = 0;
  bool trim_pending = false;
  while (!stop_) {
    const bool trim_only = std::exchange(trim_requested_, false);
    trim_pending = trim_pending || trim_only;
    const int hz = hz_;
    lock.unlock();
    const int64_t now = unix_time_ms();
    if (!trim_only && hz > 0) work_.expire_cycle(now);
    // mallinfo2() walks every free chunk of every arena under its lock,
    // stalling the writers' mallocs (2.8 % of a busy server at 10 Hz), and
    // a trim hands back pages the next allocations fault in again: look
    // once a second, and when evictions ask, at most every kMinTrimGapMs.
    const int64_t since = now - last_check_ms;
    if ((trim_pending && since >= kMinTrimGapMs) || since >= 1000) {
      last_check_ms = now;
      trim_pending = false;
      work_.return_free_memory();
    }
    // On its own clock, not at evictions' request: the pool's low-water
    // mark must span a whole interval for "not needed" to mean anything.
    if (now - last_pool_release_ms >= 1000) {
      last_pool_release_ms = now;
      work_.release_idle_buffers();
    }
    lock.lock();
    int64_t wait_ms = hz == 0 ? -1 : 1000 / std::max(hz, 1);  // -1: until asked
    if (trim_pending) {
      const int64_t until_trim = std::max<int64_t>(last_check_ms + kMinTrimGapMs - now, 1);
      wait_ms = wait_ms < 0 ? until_trim : std::min(wait_ms, until_trim);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    while (!stop_ && !trim_requested_ && hz_ == hz) {
      if (wait_ms < 0) {
        cv_.wait(mu_);
      } else if (!cv_.wait_until(mu_, deadline)) {
        break;
      }
    }
  }
}

}  // namespace tierkv::memory
