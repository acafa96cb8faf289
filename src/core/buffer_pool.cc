#include "core/buffer_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cassert>

namespace tierkv {

void AlignedBuffer::reset() {
  char* data = std::exchange(data_, nullptr);
  const size_t size = std::exchange(size_, 0);
  if (data == nullptr) return;
  if (BufferPool* pool = std::exchange(pool_, nullptr))
    pool->give_back(data, size);
  else
    std::free(data);
}

BufferPool::BufferPool(const BufferPoolOptions& o, IdleRoom idle_room)
    : granule_(o.granule),
      buffer_size_(rounded(o.buffer_size)),
      min_size_(std::min(rounded(o.min_size), buffer_size_)),
      alignment_(o.alignment),
      idle_room_(std::move(idle_room)) {
  // aligned_alloc wants a size that is a multiple of the alignment.
  assert(granule_ % alignment_ == 0);
}

BufferPool::~BufferPool() {
  std::vector<char*> all;
  MutexLock lock(mu_);
  for (auto& [size, c] : classes_) pop_locked(size, c, c.idle.size(), all);
  free_all(all);
}

AlignedBuffer BufferPool::take(size_t size) {
  const size_t bytes = rounded(size);
  if (bytes > buffer_size_ || bytes < min_size_)
    return AlignedBuffer(size, AlignedBuffer::Uninitialized{});
  char* data = nullptr;
  {
    MutexLock lock(mu_);
    auto it = classes_.find(bytes);
    if (it != classes_.end() && !it->second.idle.empty()) {
      SizeClass& c = it->second;
      data = c.idle.back();
      c.idle.pop_back();
      c.low_water = std::min(c.low_water, c.idle.size());
      idle_bytes_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    }
  }
  if (data != nullptr) {
    reused_.fetch_add(1, std::memory_order_relaxed);
  } else {
    data = static_cast<char*>(std::aligned_alloc(alignment_, bytes));
    if (data == nullptr) throw std::bad_alloc();
    // Fresh pages are faulted in by one call rather than one fault per
    // page when the buffer is first filled (best effort: Linux 5.14+).
    // madvise wants a page-aligned start: a malloc-aligned buffer is
    // faulted in by its first fill instead of failing a system call.
    if (alignment_ % kBlockSize == 0) (void)::madvise(data, bytes, MADV_POPULATE_WRITE);
    fresh_.fetch_add(1, std::memory_order_relaxed);
  }
  return AlignedBuffer(data, bytes, this);
}

void BufferPool::give_back(char* data, size_t size) {
  const int64_t room = idle_room_ ? idle_room_() : 0;
  {
    MutexLock lock(mu_);
    if (idle_bytes_.load(std::memory_order_relaxed) + static_cast<int64_t>(size) <= room) {
      classes_[size].idle.push_back(data);
      idle_bytes_.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
      return;
    }
  }
  std::free(data);
  returned_.fetch_add(1, std::memory_order_relaxed);
}

void BufferPool::pop_locked(size_t size, SizeClass& c, size_t n, std::vector<char*>& out) {
  for (size_t i = 0; i < n && !c.idle.empty(); ++i) {
    out.push_back(c.idle.back());
    c.idle.pop_back();
    idle_bytes_.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
  }
  c.low_water = std::min(c.low_water, c.idle.size());
}

void BufferPool::trim() {
  // On every prepare(): nothing idle, nothing to ask.
  if (idle_bytes_.load(std::memory_order_relaxed) == 0) return;
  const int64_t room = idle_room_ ? idle_room_() : 0;
  if (idle_bytes_.load(std::memory_order_relaxed) <= room) return;
  std::vector<char*> surplus;
  {
    MutexLock lock(mu_);
    // Largest buffers first: the fewest frees give the room back.
    for (auto it = classes_.rbegin();
         it != classes_.rend() && idle_bytes_.load(std::memory_order_relaxed) > room; ++it) {
      const int64_t over = idle_bytes_.load(std::memory_order_relaxed) - room;
      const auto size = static_cast<int64_t>(it->first);
      pop_locked(it->first, it->second, static_cast<size_t>((over + size - 1) / size), surplus);
    }
  }
  free_all(surplus);
}

void BufferPool::release_idle() {
  std::vector<char*> unneeded;
  {
    MutexLock lock(mu_);
    for (auto& [size, c] : classes_) {
      pop_locked(size, c, (c.low_water + 1) / 2, unneeded);
      c.low_water = c.idle.size();
    }
    std::erase_if(classes_, [](const auto& kv) { return kv.second.idle.empty(); });
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
