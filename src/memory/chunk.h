// Chunks: the unit of residency, eviction and I/O. A chunk is this header
// followed by its bytes in one allocation, or the header and an aligned
// buffer: a buffer from the BufferPool (chunks of 128 KiB or more), or the
// buffer a flash read filled (adopted by a promotion, so its bytes are never
// copied). It is reference counted: the index holds one reference, and
// every ChunkPin one more. The bytes are freed, and their
// charge returned to the budget, when the last reference goes.
#pragma once

#include <absl/container/inlined_vector.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "core/aligned_buffer.h"
#include "memory/policy/eviction_policy.h"

namespace tierkv::memory {

struct Object;

struct Chunk {
  static constexpr uint8_t kUseOnce = 1;     // streaming: dropped first
  static constexpr uint8_t kLeased = 2;      // protected until its LeaseTable entry ends
  static constexpr uint8_t kPrefetched = 4;  // the lease is a prefetch's (counts accuracy)

  // First member: policies hand back PolicyHook*. hook.bytes is what this
  // chunk costs the budget, credited back on free.
  PolicyHook hook;
  std::atomic<uint32_t> refs{1};
  uint32_t size = 0;
  uint32_t index = 0;
  uint8_t flags = 0;  // changed under the shard lock
  // A BufferedChunk: its bytes are in its buffer. Set at allocation and
  // never changed, so readers holding a pin read it without the lock (not
  // in `flags`, which the shard lock guards).
  bool in_buffer = false;
  Object* owner = nullptr;               // null once detached from the index
  std::atomic<int64_t>* used = nullptr;  // budget counter to credit on free

  inline char* data();
  inline const char* data() const;
  uint32_t charge() const { return hook.bytes; }
  bool pinned() const { return refs.load(std::memory_order_acquire) > 1; }

  static Chunk* from_hook(PolicyHook* h) { return reinterpret_cast<Chunk*>(h); }
  // Allocates header + bytes. The caller has already reserved `charge` in
  // *used (MemoryTier::reserve); the last release() credits it back.
  static Chunk* allocate(uint32_t size, uint32_t charge, std::atomic<int64_t>* used);
  // The same, with the bytes at `offset` in `buffer` (which holds them).
  static Chunk* allocate_in(AlignedBuffer buffer, uint32_t offset, uint32_t size, uint32_t charge,
                            std::atomic<int64_t>* used);
  // Takes `from` (bytes at `offset`, this chunk's size of them) as the bytes
  // of a chunk nobody else sees yet (held by an unpublished writer), if it
  // costs no more than the chunk is charged; the old bytes are freed.
  bool adopt(AlignedBuffer& from, uint32_t offset);
  // glibc serves requests from its mmap threshold up (128 KiB at first; it
  // adapts upward) with their own pages; below it, from the heap in 16-byte
  // steps. Charging 64 KiB values in whole pages wasted ~6% of the budget.
  static constexpr size_t kLargeAllocation = 128 * 1024;
  // Bytes this chunk costs the budget, allocator rounding included.
  static size_t charge_for(uint32_t size);
  // The same for a chunk whose bytes are in a buffer of `buffer_size`.
  static size_t charge_in_buffer(size_t buffer_size);
  void add_ref() { refs.fetch_add(1, std::memory_order_relaxed); }
  void release();
};

// A chunk whose bytes live in an aligned buffer (pooled, or filled by a
// flash read) rather than after its header. Only these pay for the buffer's
// fields: a small value's chunk is the 64-byte header and its bytes.
struct BufferedChunk : Chunk {
  char* bytes = nullptr;
  AlignedBuffer buffer;
};

char* Chunk::data() {
  return in_buffer ? static_cast<BufferedChunk*>(this)->bytes : reinterpret_cast<char*>(this + 1);
}
const char* Chunk::data() const {
  return in_buffer ? static_cast<const BufferedChunk*>(this)->bytes
                   : reinterpret_cast<const char*>(this + 1);
}

static_assert(offsetof(Chunk, hook) == 0);

// What a heap block of `bytes` costs: glibc's header and 16-byte steps below
// Chunk::kLargeAllocation, whole pages from there.
size_t heap_block_charge(size_t bytes);
static_assert(sizeof(Chunk) == 64, "the header every small value pays");

// Keeps one chunk alive (and unevictable) while its bytes are read or sent.
class ChunkPin {
 public:
  ChunkPin() = default;
  explicit ChunkPin(Chunk* c) : chunk_(c) { chunk_->add_ref(); }
  ChunkPin(const ChunkPin& o) : chunk_(o.chunk_) {
    if (chunk_) chunk_->add_ref();
  }
  ChunkPin& operator=(const ChunkPin& o) {
    ChunkPin copy(o);
    std::swap(chunk_, copy.chunk_);
    return *this;
  }
  ChunkPin(ChunkPin&& o) noexcept : chunk_(std::exchange(o.chunk_, nullptr)) {}
  ChunkPin& operator=(ChunkPin&& o) noexcept {
    std::swap(chunk_, o.chunk_);
    return *this;
  }
  ~ChunkPin() {
    if (chunk_) chunk_->release();
  }

  bool empty() const { return chunk_ == nullptr; }
  std::string_view bytes() const { return {chunk_->data(), chunk_->size}; }
  uint32_t index() const { return chunk_->index; }

 private:
  Chunk* chunk_ = nullptr;
};

// Chunks collected under a lock and released after it (most operations
// touch one object of one chunk: no allocation).
using ChunkList = absl::InlinedVector<Chunk*, 4>;

}  // namespace tierkv::memory
