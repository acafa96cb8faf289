#include "store/promotion_pool.h"

#include <algorithm>

namespace tierkv {

PromotionPool::PromotionPool(size_t workers, size_t max_queued)
    : max_queued_(std::max<size_t>(max_queued, 1)) {
  workers = std::max<size_t>(workers, 1);
  threads_.reserve(workers);
  for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
}

PromotionPool::~PromotionPool() {
  stop();
}

bool PromotionPool::try_submit(Job job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

void PromotionPool::submit_continuation(Job job) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      queue_.push_back(std::move(job));
      job = nullptr;
    }
  }
  if (job) {
    job(false);
    return;
  }
  cv_.notify_one();
}

void PromotionPool::stop() {
  std::deque<Job> dropped;
  {
    std::lock_guard lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (Job& j : dropped) j(false);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

size_t PromotionPool::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void PromotionPool::work() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job(true);
  }
}

}  // namespace tierkv
