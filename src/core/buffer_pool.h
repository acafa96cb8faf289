// BufferPool: aligned buffers from min_size up to buffer_size (a chunk and
// its flash record header), kept mapped between uses, in one free list per
// size (rounded up to whole granules: blocks, or less for a pool whose
// buffers never take direct I/O).
//
// Why: the kernel zeroes every page a process touches for the first time. On
// the virtual machines we run on, first touch of fresh memory moves 0.4 GB/s
// where a memcpy moves 22 GB/s, so a 1 MiB chunk in fresh pages costs more
// than the flash read that fills it. Flash reads take their buffers here, a
// promotion keeps the read buffer as its memory chunk, and full memory chunks
// are buffers from here too: a chunk freed by eviction is the next read's
// buffer, and nothing on those paths faults pages in. Values smaller than a
// chunk (KV-cache blocks of 256 KiB, say) come in few sizes, so their
// buffers are kept by size as well; below min_size malloc's heap keeps its
// pages anyway.
// A buffer the pool allocates afresh has its pages faulted in by one
// madvise(MADV_POPULATE_WRITE) before it is handed out: the same zeroing,
// without a fault per page in the thread that fills it (a network thread
// receiving a value, say).
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
#include <map>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/mutex.h"

namespace tierkv {

struct BufferPoolStats {
  int64_t idle_bytes = 0;  // buffers kept for reuse
  uint64_t reused = 0;     // takes served by a kept buffer
  uint64_t fresh = 0;      // takes that allocated a new one
  uint64_t returned = 0;   // buffers freed to the allocator
  BufferPoolStats& operator+=(const BufferPoolStats& o) {
    idle_bytes += o.idle_bytes;
    reused += o.reused;
    fresh += o.fresh;
    returned += o.returned;
    return *this;
  }
};

struct BufferPoolOptions {
  size_t buffer_size = 0;         // the largest buffer, always pooled
  size_t min_size = 128 << 10;    // the smallest pooled (glibc's mmap threshold)
  size_t granule = kBlockSize;    // buffer sizes are whole granules
  size_t alignment = kBlockSize;  // of every buffer; at most the granule
};

class BufferPool {
 public:
  // Bytes idle buffers may hold now; read at each give_back() and trim().
  using IdleRoom = std::function<int64_t()>;

  // Buffers may take direct I/O only with the defaults (whole blocks,
  // block-aligned). A pool that only ever takes copies uses a finer granule
  // and malloc's alignment: glibc's aligned_alloc at 4 KiB leaves a free
  // fragment of up to 4 KiB beside each block, and a whole last block costs
  // a 50,000 B value 6.5 %.
  BufferPool(const BufferPoolOptions& options, IdleRoom idle_room);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  size_t buffer_size() const { return buffer_size_; }
  // The bytes take(size) holds: `size` rounded up to whole granules.
  size_t rounded(size_t size) const { return align_up(size, granule_); }
  // An uninitialised buffer of rounded(size) bytes: one of the pool's if
  // that is from min_size to buffer_size(), else a plain one of whole
  // blocks the pool never sees again.
  AlignedBuffer take(size_t size);
  // Called by a pooled AlignedBuffer of `size` bytes when it is destroyed.
  void give_back(char* data, size_t size);
  // Gives buffers back to the allocator while idle bytes pass idle_room().
  void trim();
  // Gives back half of the buffers of each size that no take() needed
  // since the last call.
  void release_idle();
  BufferPoolStats stats() const;
  int64_t idle_bytes() const { return idle_bytes_.load(std::memory_order_relaxed); }
  // take() from `pool` if there is one, else a plain uninitialised buffer.
  static AlignedBuffer take_from(BufferPool* pool, size_t size) {
    return pool != nullptr ? pool->take(size) : AlignedBuffer(size, AlignedBuffer::Uninitialized{});
  }

 private:
  struct SizeClass {
    std::vector<char*> idle;
    size_t low_water = 0;  // fewest idle buffers since release_idle()
  };
  // Moves up to `n` idle buffers of `size` into `out`.
  void pop_locked(size_t size, SizeClass& c, size_t n, std::vector<char*>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void free_all(std::vector<char*>& buffers);

  const size_t granule_;
  const size_t buffer_size_;
  const size_t min_size_;
  const size_t alignment_;
  const IdleRoom idle_room_;
  mutable Mutex mu_;
  std::map<size_t, SizeClass> classes_ ABSL_GUARDED_BY(mu_);  // by buffer size
  std::atomic<int64_t> idle_bytes_{0};
  std::atomic<uint64_t> reused_{0}, fresh_{0}, returned_{0};
};

}  // namespace tierkv
