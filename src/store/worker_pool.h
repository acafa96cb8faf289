// WorkerPool: a bounded pool of background threads. The store runs two:
// one for promotions, prefetches, demand kicks and staged-put commits
// (promotion-workers), one for preheat jobs (preheat-workers). Their work
// never runs on a network thread or on a flash I/O-completion thread.
//
// Jobs are queued up to max_queued; a continuation (the second half of a
// job whose flash read completed) is always taken, since the in-flight cap
// already bounds those. A job is called once: run = true on a worker, or
// run = false if the pool is stopping (or refuses it), so that whatever it
// holds is released and its caller hears back.
#pragma once

#include <absl/base/thread_annotations.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/mutex.h"

namespace tierkv {

class WorkerPool {
 public:
  using Job = std::function<void(bool run)>;

  // `before_job` (tests) runs on the worker before each job it takes.
  WorkerPool(size_t workers, size_t max_queued, std::function<void()> before_job = {});
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False (and the job is not called) if the queue is full or the pool
  // stopped; the caller still owns what the job holds.
  bool try_submit(Job job);
  // Always takes the job: queued, or called with run = false at once if
  // the pool stopped.
  void submit_continuation(Job job);
  // Runs no more jobs: queued ones are called with run = false; returns
  // once the workers have left. Later submissions are refused.
  void stop() ABSL_LOCKS_EXCLUDED(mu_);

  size_t queued() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t workers() const { return threads_.size(); }

 private:
  void work() ABSL_LOCKS_EXCLUDED(mu_);

  const size_t max_queued_;
  const std::function<void()> before_job_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Started by the constructor, joined by stop(): the owner's thread only.
  std::vector<std::thread> threads_;
};

}  // namespace tierkv
