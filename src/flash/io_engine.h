// IoEngine: asynchronous positioned reads, writes and fsyncs on one file.
//
// Two implementations behind one interface:
// * io_uring: one ring; submitters share it under a mutex and submit a batch
//   with one system call; a completion thread reaps the ring.
// * thread pool: workers run pread/pwrite/fdatasync. Used where io_uring is
//   unavailable (old kernel, seccomp) or when asked for.
//
// Both can model a slower device for reads (the backing model): with
// `read_bandwidth` set, the reads share one link of that many bytes per
// second, in the order the device finished them (two reads in flight take
// twice as long as one); then `read_latency_ns` is added. A read completes no
// earlier than that after the device finished it. The wait is a timed sleep
// that stops short of the deadline and then spins, so it does not overshoot
// the way sleep_for does.
//
// Completions run on the engine's threads. The owner keeps every request
// alive until its completion has run, and destroys the engine only when
// nothing is in flight.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "core/status.h"

namespace tierkv::flash {

struct IoRequest {
  enum class Op : uint8_t { kRead, kWrite, kFsync };

  virtual ~IoRequest() = default;
  // `result` is the byte count (the whole length) or -errno.
  virtual void on_complete(int64_t result) = 0;

  Op op = Op::kRead;
  char* buf = nullptr;
  uint64_t length = 0;
  uint64_t offset = 0;
  uint64_t done = 0;  // engine-private: bytes transferred so far
  // Engine-private: released by the submitter, acquired by the completer.
  // The kernel's ring hand-off already orders the two threads, but only this
  // makes the order visible to ThreadSanitizer.
  std::atomic<uint32_t> handoff{0};
};

struct IoEngineOptions {
  int fd = -1;
  uint32_t queue_depth = 64;  // most requests in flight at once
  uint64_t read_latency_ns = 0;
  uint64_t read_bandwidth = 0;  // bytes per second; 0: no limit
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual void submit(std::span<IoRequest* const> requests) = 0;
  void submit(IoRequest* request) { submit(std::span<IoRequest* const>(&request, 1)); }
  virtual std::string_view name() const = 0;
};

// Unavailable if the kernel refuses a ring (the caller falls back).
Result<std::unique_ptr<IoEngine>> make_uring_engine(const IoEngineOptions& options);
std::unique_ptr<IoEngine> make_thread_pool_engine(const IoEngineOptions& options);

// Returns at the monotonic time `deadline_ns` (mono_ns() clock), not later
// than a few microseconds past it: sleeps until shortly before, then spins.
void wait_until_ns(uint64_t deadline_ns);

}  // namespace tierkv::flash
