#include "flash/io_engine.h"

#include <errno.h>
#include <liburing.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/mutex.h"

namespace tierkv::flash {
namespace {

// Timed sleeps (with the timer slack at 1 ns) wake a few us late on an idle
// machine (on the 2-core CI VM: 8.5 us at the median, 10.5 us at p90); the
// last stretch before a deadline is spun instead. Kept just above that: a
// spinning reaper takes CPU from the I/O path and the consumer it models a
// device for (at 20 us, P = 4 reads of L = 50 us kept a core 2/3 busy), and
// on a busy machine the spinner is preempted anyway.
constexpr uint64_t kSpinNs = 12'000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Timed waits on I/O threads should wake on time: the default 50 us timer
// slack would eat most of the margin before a backing-latency deadline.
void tighten_timer_slack() {
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

void spin_until(uint64_t deadline_ns) {
  while (mono_ns() < deadline_ns) cpu_relax();
}

// When a modelled read completes: after its transfer over the shared link
// (FIFO, at the modelled bandwidth) and the fixed latency.
class ReadModel {
 public:
  explicit ReadModel(const IoEngineOptions& o)
      : latency_ns_(o.read_latency_ns),
        ns_per_byte_(o.read_bandwidth == 0 ? 0.0 : 1e9 / static_cast<double>(o.read_bandwidth)) {}
  bool active() const { return latency_ns_ > 0 || ns_per_byte_ > 0; }
  // For a read of `bytes` the device finished at `now_ns`. Deadlines of
  // successive calls ascend.
  uint64_t due(uint64_t now_ns, uint64_t bytes) {
    if (ns_per_byte_ == 0) return now_ns + latency_ns_;
    MutexLock lock(mu_);
    const auto transfer = static_cast<uint64_t>(ns_per_byte_ * static_cast<double>(bytes));
    link_free_ns_ = std::max(link_free_ns_, now_ns) + transfer;
    return link_free_ns_ + latency_ns_;
  }

 private:
  const uint64_t latency_ns_;
  const double ns_per_byte_;
  Mutex mu_;
  uint64_t link_free_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

// Runs one request synchronously; returns bytes or -errno.
int64_t run_blocking(int fd, IoRequest& r) {
  if (r.op == IoRequest::Op::kFsync) return ::fdatasync(fd) == 0 ? 0 : -errno;
  while (r.done < r.length) {
    char* p = r.buf + r.done;
    const size_t n = r.length - r.done;
    const off_t off = static_cast<off_t>(r.offset + r.done);
    const ssize_t got =
        r.op == IoRequest::Op::kRead ? ::pread(fd, p, n, off) : ::pwrite(fd, p, n, off);
    if (got < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (got == 0) return r.op == IoRequest::Op::kRead ? -ENODATA : -EIO;
    r.done += static_cast<uint64_t>(got);
  }
  return static_cast<int64_t>(r.length);
}

class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(const IoEngineOptions& options) : fd_(options.fd), model_(options) {}

  // Sets up the ring and starts the reaper; on failure nothing is left open.
  Status init(unsigned entries) {
    const int rc = io_uring_queue_init(entries, &ring_, 0);
    if (rc < 0)
      return Status::unavailable(std::string("io_uring_queue_init: ") + std::strerror(-rc));
    // Waiting with a timeout while other threads submit needs EXT_ARG (5.11+);
    // without it liburing would queue a timeout SQE from the reaper thread.
    if ((ring_.features & IORING_FEAT_EXT_ARG) == 0 || (ring_.features & IORING_FEAT_NODROP) == 0) {
      io_uring_queue_exit(&ring_);
      return Status::unavailable("io_uring lacks EXT_ARG/NODROP (kernel too old)");
    }
    initialized_ = true;
    reaper_ = std::thread([this] { reap_loop(); });
    return Status::ok();
  }

  ~UringEngine() override {
    if (!initialized_) return;
    {
      MutexLock lock(submit_mu_);
      io_uring_sqe* sqe = next_sqe_locked();
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data(sqe, nullptr);  // the stop sentinel
      io_uring_submit(&ring_);
    }
    reaper_.join();
    io_uring_queue_exit(&ring_);
  }

  using IoEngine::submit;
  void submit(std::span<IoRequest* const> requests) override {
    MutexLock lock(submit_mu_);
    for (IoRequest* r : requests) prep_locked(r);
    io_uring_submit(&ring_);
  }

  std::string_view name() const override { return "io_uring"; }

 private:
  struct Delayed {
    IoRequest* request;
    int64_t result;
    uint64_t deadline_ns;
  };

  io_uring_sqe* next_sqe_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(submit_mu_) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {  // SQ full: push what is queued to the kernel
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }

  void prep_locked(IoRequest* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(submit_mu_) {
    io_uring_sqe* sqe = next_sqe_locked();
    const unsigned n = static_cast<unsigned>(r->length - r->done);
    switch (r->op) {
      case IoRequest::Op::kRead:
        io_uring_prep_read(sqe, fd_, r->buf + r->done, n, r->offset + r->done);
        break;
      case IoRequest::Op::kWrite:
        io_uring_prep_write(sqe, fd_, r->buf + r->done, n, r->offset + r->done);
        break;
      case IoRequest::Op::kFsync:
        io_uring_prep_fsync(sqe, fd_, IORING_FSYNC_DATASYNC);
        break;
    }
    io_uring_sqe_set_data(sqe, r);
    r->handoff.fetch_add(1, std::memory_order_release);  // last touch before the kernel's
  }

  // Returns true when the stop sentinel arrived.
  bool handle(io_uring_cqe* cqe, std::deque<Delayed>& delayed) {
    auto* r = static_cast<IoRequest*>(io_uring_cqe_get_data(cqe));
    if (r == nullptr) return true;
    r->handoff.load(std::memory_order_acquire);
    const int res = cqe->res;
    if (res == -EAGAIN || res == -EINTR ||
        (res > 0 && r->op != IoRequest::Op::kFsync && r->done + res < r->length)) {
      if (res > 0) r->done += static_cast<uint64_t>(res);
      submit(r);  // short or interrupted transfer: continue where it stopped
      return false;
    }
    int64_t result = res;
    if (res > 0) result = static_cast<int64_t>(r->length);
    if (res == 0 && r->op != IoRequest::Op::kFsync && r->length > 0) result = -ENODATA;
    if (r->op == IoRequest::Op::kRead && model_.active()) {
      delayed.push_back({r, result, model_.due(mono_ns(), r->length)});
    } else {
      r->on_complete(result);
    }
    return false;
  }

  // A modelled read is delivered L after the reaper sees its completion, so
  // completions must be seen when they happen: the reaper never spins or
  // sleeps without watching the ring, or reads completing meanwhile would
  // queue behind the deadline it waits for (P staggered reads would each
  // wait for the one before: serialized, not parallel).
  void reap_loop() {
    tighten_timer_slack();
    std::deque<Delayed> delayed;  // deadlines ascend (ReadModel::due)
    bool stopping = false;
    while (!stopping || !delayed.empty()) {
      wait_for_completion(delayed, stopping);
      stopping = harvest(delayed) || stopping;
      stopping = deliver_due(delayed) || stopping;
    }
  }

  // Blocks until a completion arrives or the first deadline is near.
  void wait_for_completion(const std::deque<Delayed>& delayed, bool stopping) {
    io_uring_cqe* cqe = nullptr;
    if (delayed.empty()) {
      io_uring_wait_cqe(&ring_, &cqe);
      return;
    }
    const uint64_t now = mono_ns();
    const uint64_t due = delayed.front().deadline_ns;
    if (stopping || due <= now + kSpinNs) return;
    const uint64_t wait = due - now - kSpinNs;
    __kernel_timespec ts{static_cast<int64_t>(wait / 1'000'000'000),
                         static_cast<long long>(wait % 1'000'000'000)};
    io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
  }

  // Handles every completion in the ring; true when the stop sentinel came.
  bool harvest(std::deque<Delayed>& delayed) {
    bool stop = false;
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      if (handle(cqe, delayed)) stop = true;
    }
    io_uring_cq_advance(&ring_, seen);
    return stop;
  }

  // Delivers the reads that are due, spinning for a deadline only
  // microseconds away while still harvesting the ring.
  bool deliver_due(std::deque<Delayed>& delayed) {
    bool stop = false;
    while (!delayed.empty() && delayed.front().deadline_ns <= mono_ns() + kSpinNs) {
      while (mono_ns() < delayed.front().deadline_ns) {
        if (io_uring_cq_ready(&ring_) > 0) {
          stop = harvest(delayed) || stop;
        } else {
          cpu_relax();
        }
      }
      Delayed d = delayed.front();
      delayed.pop_front();
      d.request->on_complete(d.result);
    }
    return stop;
  }

  const int fd_;
  ReadModel model_;
  io_uring ring_{};
  bool initialized_ = false;
  Mutex submit_mu_;  // the submission queue of ring_ (the reaper reads completions)
  std::thread reaper_;
};

class ThreadPoolEngine final : public IoEngine {
 public:
  explicit ThreadPoolEngine(const IoEngineOptions& options) : fd_(options.fd), model_(options) {
    const uint32_t n = std::clamp<uint32_t>(options.queue_depth, 1, 64);
    for (uint32_t i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
  }

  ~ThreadPoolEngine() override {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  using IoEngine::submit;
  void submit(std::span<IoRequest* const> requests) override {
    {
      MutexLock lock(mu_);
      queue_.insert(queue_.end(), requests.begin(), requests.end());
    }
    if (requests.size() == 1) {
      cv_.notify_one();
    } else {
      cv_.notify_all();
    }
  }

  std::string_view name() const override { return "thread-pool"; }

 private:
  void work() {
    tighten_timer_slack();
    for (;;) {
      IoRequest* r = nullptr;
      {
        MutexLock lock(mu_);
        while (!stop_ && queue_.empty()) cv_.wait(mu_);
        if (queue_.empty()) return;
        r = queue_.front();
        queue_.pop_front();
      }
      const int64_t result = run_blocking(fd_, *r);
      if (r->op == IoRequest::Op::kRead && model_.active())
        wait_until_ns(model_.due(mono_ns(), r->length));
      r->on_complete(result);
    }
  }

  const int fd_;
  ReadModel model_;
  Mutex mu_;
  CondVar cv_;
  std::deque<IoRequest*> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace

void wait_until_ns(uint64_t deadline_ns) {
  for (;;) {
    const uint64_t now = mono_ns();
    if (now >= deadline_ns) return;
    if (deadline_ns - now <= kSpinNs) {
      spin_until(deadline_ns);
      return;
    }
    // mono_ns() is steady_clock, which is CLOCK_MONOTONIC on Linux.
    const uint64_t wake = deadline_ns - kSpinNs;
    timespec ts{static_cast<time_t>(wake / 1'000'000'000), static_cast<long>(wake % 1'000'000'000)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
  }
}

Result<std::unique_ptr<IoEngine>> make_uring_engine(const IoEngineOptions& options) {
  // Room for every request the owner may have in flight plus the sentinel.
  const unsigned entries = std::bit_ceil(std::max<unsigned>(options.queue_depth, 8) + 1);
  auto engine = std::make_unique<UringEngine>(options);
  TIERKV_RETURN_IF_ERROR(engine->init(entries));
  return std::unique_ptr<IoEngine>(std::move(engine));
}

std::unique_ptr<IoEngine> make_thread_pool_engine(const IoEngineOptions& options) {
  return std::make_unique<ThreadPoolEngine>(options);
}

}  // namespace tierkv::flash
