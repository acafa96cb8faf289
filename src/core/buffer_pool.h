// BufferPool: aligned buffers of one size (a chunk and its flash record
// header), kept mapped between uses.
//
// Why: the kernel zeroes every page a process touches for the first time. On
// the virtual machines we run on, first touch of fresh memory moves 0.4 GB/s
// where a memcpy moves 22 GB/s, so a 1 MiB chunk in fresh pages costs more
// than the flash read that fills it. Flash reads take their buffers here, a
// promotion keeps the read buffer as its memory chunk, and full memory chunks
// are buffers from here too: a chunk freed by eviction is the next read's
// buffer, and nothing on those paths faults pages in.
//
// Bounded: a buffer given back is kept only while the idle bytes stay within
// idle_room() (the store's: the memory budget left unused plus the flash read
// buffer budget left unused); trim() gives back what passes it, for example
// after the budget shrank, and release_idle() gives back half of the buffers
// no take() needed since its last call, so an idle pool drains.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "core/aligned_buffer.h"

namespace tierkv {

struct BufferPoolStats {
  int64_t idle_bytes = 0;  // buffers kept for reuse
  uint64_t reused = 0;     // takes served by a kept buffer
  uint64_t fresh = 0;      // takes that allocated a new one
  uint64_t returned = 0;   // buffers freed to the allocator
};

class BufferPool {
 public:
  // Bytes idle buffers may hold now; read at each give_back() and trim().
  using IdleRoom = std::function<int64_t()>;

  BufferPool(size_t buffer_size, IdleRoom idle_room);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  size_t buffer_size() const { return buffer_size_; }
  // An uninitialised buffer of at least `size` bytes: one of the pool's if
  // it fits buffer_size() and needs more than half of it, else a plain one
  // the pool never sees again.
  AlignedBuffer take(size_t size);
  // Called by a pooled AlignedBuffer when it is destroyed.
  void give_back(char* data);
  // Gives buffers back to the allocator while idle bytes pass idle_room().
  void trim();
  // Gives back half of the buffers no take() needed since the last call.
  void release_idle();
  BufferPoolStats stats() const;

 private:
  void free_all(std::vector<char*>& buffers);

  const size_t buffer_size_;
  const IdleRoom idle_room_;
  mutable std::mutex mu_;
  std::vector<char*> idle_;  // guarded by mu_
  size_t low_water_ = 0;     // fewest idle buffers since release_idle(); mu_
  std::atomic<int64_t> idle_bytes_{0};
  std::atomic<uint64_t> reused_{0}, fresh_{0}, returned_{0};
};

}  // namespace tierkv
