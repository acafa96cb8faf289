#include "store/worker_pool.h"

#include <algorithm>

namespace tierkv {

WorkerPool::WorkerPool(size_t workers, size_t max_queued, std::function<void()> before_job)
    : max_queued_(std::max<size_t>(max_queued, 1)), before_job_(std::move(before_job)) {
  workers = std::max<size_t>(workers, 1);
  threads_.reserve(workers);
  for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() {
  stop();
}

bool WorkerPool::try_submit(Job job) {
  bool was_empty = false;
  {
    MutexLock lock(mu_);
    if (stopping_ || queue_.size() >= max_queued_) return false;
    was_empty = queue_.empty();
    queue_.push_back(std::move(job));
  }
  // A probe queues a job per key from a network thread: waking a worker is
  // a syscall, so only the first job of a burst wakes one; each worker that
  // takes a job and leaves more behind wakes the next (see work()).
  if (was_empty) cv_.notify_one();
  return true;
}

void WorkerPool::submit_continuation(Job job) {
  bool was_empty = false;
  {
    MutexLock lock(mu_);
    if (!stopping_) {
      was_empty = queue_.empty();
      queue_.push_back(std::move(job));
      job = nullptr;
    }
  }
  if (job) {
    job(false);
    return;
  }
  if (was_empty) cv_.notify_one();
}

void WorkerPool::stop() {
  std::deque<Job> dropped;
  {
    MutexLock lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (Job& j : dropped) j(false);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

size_t WorkerPool::queued() const {
  MutexLock lock(mu_);
  return queue_.size();
}

void WorkerPool::work() {
  for (;;) {
    Job job;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) cv_.wait(mu_);
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      if (!queue_.empty()) cv_.notify_one();
    }
    if (before_job_) before_job_();
    job(true);
  }
}

}  // namespace tierkv
