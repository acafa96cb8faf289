// BufferBudget: a process-wide byte cap on I/O buffers, with FIFO waiters.
//
// The flash reader charges every chunk buffer it reads into to one
// (flash-read-buffer); large SETs written to flash as they arrive charge
// every buffer they fill to another (flash-write-buffer). A request that
// does not fit waits without blocking a thread: its `granted` runs, with
// the bytes already taken, once released bytes make room. Waiters are
// served in order and a new request never overtakes a waiting one, so a
// large request is not starved by small ones. Thread-safe.
#pragma once

#include <absl/container/inlined_vector.h>

#include <cstdint>
#include <deque>
#include <functional>

#include "core/metrics.h"
#include "core/mutex.h"

namespace tierkv {

class BufferBudget {
 public:
  struct Metrics {
    Gauge& used;     // bytes taken now
    Gauge& limit;    // the cap
    Counter& waits;  // requests that had to wait
  };
  BufferBudget(int64_t limit, Metrics metrics);

  // Takes `bytes` now (true), or queues `granted` (false), which runs once
  // released bytes make room, with the bytes already taken.
  bool acquire(int64_t bytes, std::function<void()> granted);
  // Takes `bytes` now even past the cap (and ahead of waiters): for bytes
  // already in hand that must go somewhere; they come back by release().
  void take(int64_t bytes);
  void release(int64_t bytes);
  void set_limit(int64_t limit);

  int64_t used() const { return metrics_.used.value(); }
  int64_t limit() const { return metrics_.limit.value(); }
  uint64_t waits() const { return metrics_.waits.value(); }

 private:
  struct Waiter {
    int64_t bytes;
    std::function<void()> granted;
  };
  // Takes the queued waiters that now fit, for the caller to run once it
  // has let go of the lock.
  absl::InlinedVector<std::function<void()>, 2> take_granted_locked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t limit_ ABSL_GUARDED_BY(mu_);
  std::deque<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  Metrics metrics_;
};

}  // namespace tierkv
