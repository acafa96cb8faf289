// ActiveExpiry: the memory tier's background thread.
//
// At `hz` cycles per second it runs one active-expiry cycle (Redis's
// sampling; the tier's lease sweep rides along). Once a second, and when
// request_trim() asks (evictions freed a quarter of the budget) at most every
// kMinTrimGapMs, it hands memory the allocator holds free back to the
// kernel; once a second it
// releases the buffer pool's idle buffers. At hz 0 it runs no cycle and wakes
// only for requested trims. A new rate applies at once.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>

#include "core/mutex.h"

namespace tierkv::memory {

class ActiveExpiry {
 public:
  // A trim hands back pages the next allocations fault in again. At every
  // request, values of 16-512 KiB churning at 1.4 GB/s through a 256 MiB
  // budget were trimmed ~20 times a second (bench/vs-extstore: 8,300-9,800
  // ops/s against 10,700-11,700 at this gap, peak RSS the same).
  static constexpr int64_t kMinTrimGapMs = 500;

  struct Work {
    std::function<void(int64_t now_ms)> expire_cycle;
    std::function<void()> return_free_memory;
    std::function<void()> release_idle_buffers;
  };

  explicit ActiveExpiry(Work work) : work_(std::move(work)) {}
  ~ActiveExpiry() { stop(); }
  ActiveExpiry(const ActiveExpiry&) = delete;
  ActiveExpiry& operator=(const ActiveExpiry&) = delete;

  // Starts the thread, or changes its rate.
  void start(int hz);
  // Stops and joins the thread (idempotent).
  void stop();
  // Wakes the thread to return free memory now.
  void request_trim();

 private:
  void run();

  Work work_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int hz_ ABSL_GUARDED_BY(mu_) = 0;
  bool trim_requested_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tierkv::memory
