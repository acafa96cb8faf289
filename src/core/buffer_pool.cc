#include "core/buffer_pool.h"

#include <algorithm>

namespace tierkv {

void AlignedBuffer::reset() {
  char* data = std::exchange(data_, nullptr);
  size_ = 0;
  if (data == nullptr) return;
  if (BufferPool* pool = std::exchange(pool_, nullptr))
    pool->give_back(data);
  else
    std::free(data);
}

BufferPool::BufferPool(size_t buffer_size, IdleRoom idle_room)
    : buffer_size_(align_up(buffer_size)), idle_room_(std::move(idle_room)) {}

BufferPool::~BufferPool() {
  std::lock_guard lock(mu_);
  free_all(idle_);
}

AlignedBuffer BufferPool::take(size_t size) {
  // A small read in a whole buffer would hold far more than it is charged.
  if (align_up(size) > buffer_size_ || 2 * align_up(size) <= buffer_size_)
    return AlignedBuffer(size, AlignedBuffer::Uninitialized{});
  char* data = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      data = idle_.back();
      idle_.pop_back();
      low_water_ = std::min(low_water_, idle_.size());
      idle_bytes_.fetch_sub(static_cast<int64_t>(buffer_size_), std::memory_order_relaxed);
    }
  }
  if (data != nullptr) {
    reused_.fetch_add(1, std::memory_order_relaxed);
  } else {
    data = static_cast<char*>(std::aligned_alloc(kBlockSize, buffer_size_));
    if (data == nullptr) throw std::bad_alloc();
    fresh_.fetch_add(1, std::memory_order_relaxed);
  }
  return AlignedBuffer(data, buffer_size_, this);
}

void BufferPool::give_back(char* data) {
  const auto size = static_cast<int64_t>(buffer_size_);
  const int64_t room = idle_room_ ? idle_room_() : 0;
  {
    std::lock_guard lock(mu_);
    if (idle_bytes_.load(std::memory_order_relaxed) + size <= room) {
      idle_.push_back(data);
      idle_bytes_.fetch_add(size, std::memory_order_relaxed);
      return;
    }
  }
  std::free(data);
  returned_.fetch_add(1, std::memory_order_relaxed);
}

void BufferPool::trim() {
  // On every prepare(): nothing idle, nothing to ask.
  if (idle_bytes_.load(std::memory_order_relaxed) == 0) return;
  const auto size = static_cast<int64_t>(buffer_size_);
  const int64_t room = idle_room_ ? idle_room_() : 0;
  if (idle_bytes_.load(std::memory_order_relaxed) <= room) return;
  std::vector<char*> surplus;
  {
    std::lock_guard lock(mu_);
    while (!idle_.empty() && idle_bytes_.load(std::memory_order_relaxed) > room) {
      surplus.push_back(idle_.back());
      idle_.pop_back();
      idle_bytes_.fetch_sub(size, std::memory_order_relaxed);
    }
    low_water_ = std::min(low_water_, idle_.size());
  }
  free_all(surplus);
}

void BufferPool::release_idle() {
  std::vector<char*> unneeded;
  {
    std::lock_guard lock(mu_);
    const size_t n = (low_water_ + 1) / 2;
    for (size_t i = 0; i < n && !idle_.empty(); ++i) {
      unneeded.push_back(idle_.back());
      idle_.pop_back();
    }
    idle_bytes_.fetch_sub(static_cast<int64_t>(unneeded.size() * buffer_size_),
                          std::memory_order_relaxed);
    low_water_ = idle_.size();
  }
  free_all(unneeded);
}

void BufferPool::free_all(std::vector<char*>& buffers) {
  for (char* data : buffers) std::free(data);
  returned_.fetch_add(buffers.size(), std::memory_order_relaxed);
  buffers.clear();
}

BufferPoolStats BufferPool::stats() const {
  return {.idle_bytes = idle_bytes_.load(std::memory_order_relaxed),
          .reused = reused_.load(std::memory_order_relaxed),
          .fresh = fresh_.load(std::memory_order_relaxed),
          .returned = returned_.load(std::memory_order_relaxed)};
}

}  // namespace tierkv
