// Chunks: the unit of residency, eviction and I/O. A chunk is reference
// counted: the index holds one reference, and every ChunkPin one more. Its
// bytes are freed, and their charge returned to the budget, when the last
// reference goes. Three kinds, fixed at allocation:
// * fused: the one chunk of a small object, in the object's own block
//   ([Chunk][Object][key][value], object.h). Freeing it frees the object.
// * separate (SeparateChunk): header and bytes in one block of their own;
//   the chunks of larger objects.
// * buffered (BufferedChunk): header and an aligned buffer: a buffer from
//   the BufferPool (chunks of 16 KiB or more), or the buffer a flash read
//   filled (adopted by a promotion, so its bytes are never copied).
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

// The budget counters chunks credit on free, by a one-byte id: a chunk has
// no room for a pointer to its tier's counter. A MemoryTier holds one slot
// for its life; id 0 means no counter (chunks made outside a tier).
class BudgetSlot {
 public:
  explicit BudgetSlot(std::atomic<int64_t>* counter);
  ~BudgetSlot();
  BudgetSlot(const BudgetSlot&) = delete;
  BudgetSlot& operator=(const BudgetSlot&) = delete;
  uint8_t id() const { return id_; }
  // The counter of `id` (nullptr for 0).
  static std::atomic<int64_t>* counter(uint8_t id);

 private:
  uint8_t id_;
};

struct Chunk {
  // Chunk flags, in hook.owner_flags; changed under the shard lock.
  static constexpr uint8_t kUseOnce = 1;     // streaming: dropped first
  static constexpr uint8_t kLeased = 2;      // protected until its LeaseTable entry ends
  static constexpr uint8_t kPrefetched = 4;  // the lease is a prefetch's (counts accuracy)
  static constexpr uint8_t kDetached = 8;    // a fused chunk not (or no longer) indexed

  // First member: policies hand back PolicyHook*. hook.bytes is what this
  // chunk costs the budget, credited back on free.
  PolicyHook hook;

  // The reference count in the low 24 bits, the budget id (BudgetSlot) in
  // the top 8: one atomic word, so the id costs no room of its own.
  std::atomic<uint32_t> refs_word{1};
  // Set at allocation and never changed, so readers holding a pin read
  // them without the lock.
  uint32_t size : 30 = 0;
  uint32_t in_buffer : 1 = 0;
  uint32_t fused : 1 = 0;

  uint8_t& flags() { return hook.owner_flags; }
  uint8_t flags() const { return hook.owner_flags; }
  char* data();
  const char* data() const { return const_cast<Chunk*>(this)->data(); }
  uint32_t charge() const { return hook.bytes; }
  uint32_t refs() const { return refs_word.load(std::memory_order_acquire) & kCountMask; }
  bool pinned() const { return refs() > 1; }
  // Position in the object (0 for a fused chunk).
  uint32_t index() const;
  // The object that indexes this chunk; null once detached (or before it
  // is published). Needs the shard lock.
  Object* owner() const;
  void set_owner(Object* obj);
  void detach();

  static Chunk* from_hook(PolicyHook* h) { return reinterpret_cast<Chunk*>(h); }
  // A separate chunk: header + bytes. The caller has already reserved
  // `charge` in the budget of `budget_id` (MemoryTier::reserve); the last
  // release() credits it back.
  static Chunk* allocate(uint32_t size, uint32_t charge, uint8_t budget_id);
  // The same, with the bytes at `offset` in `buffer` (which holds them).
  static Chunk* allocate_in(AlignedBuffer buffer, uint32_t offset, uint32_t size, uint32_t charge,
                            uint8_t budget_id);
  // Takes `from` (bytes at `offset`, this chunk's size of them) as the bytes
  // of a chunk nobody else sees yet (held by an unpublished writer), if it
  // costs no more than the chunk is charged; the old bytes are freed.
  bool adopt(AlignedBuffer& from, uint32_t offset);
  // glibc serves requests from its mmap threshold up (128 KiB at first; it
  // adapts upward) with their own pages; below it, from the heap in 16-byte
  // steps. Charging 64 KiB values in whole pages wasted ~6% of the budget.
  static constexpr size_t kLargeAllocation = 128 * 1024;
  // Chunks from 16 KiB up keep their bytes in BufferPool buffers, and so do
  // flash reads that size. From the heap, a value that size was copied into
  // pages a trim (return_free_memory) had handed back and faulted them in
  // again: under churn of 16-128 KiB values, the trims' TLB shootdowns and
  // the faults cost ~5 % of a busy server's CPU.
  static constexpr size_t kPooledMin = 16 * 1024;
  // The most bytes one chunk holds (its size field's width).
  static constexpr uint32_t kMaxSize = (1u << 30) - 1;
  // Bytes a separate chunk costs the budget, allocator rounding included.
  static size_t charge_for(uint32_t size);
  // The same for a chunk whose bytes are in a buffer of `buffer_size`.
  static size_t charge_in_buffer(size_t buffer_size);
  void add_ref() { refs_word.fetch_add(1, std::memory_order_relaxed); }
  void release();

  static constexpr uint32_t kCountMask = (1u << 24) - 1;
  void set_budget_id(uint8_t id) { refs_word.store(1 | (uint32_t{id} << 24)); }
};

// A chunk in a block of its own, apart from its object.
struct SeparateChunk : Chunk {
  Object* owner = nullptr;  // null once detached from the index
  uint32_t index = 0;
};

// A separate chunk whose bytes live in an aligned buffer (pooled, or filled
// by a flash read) rather than after its header.
struct BufferedChunk : SeparateChunk {
  char* bytes = nullptr;
  AlignedBuffer buffer;
};

static_assert(offsetof(Chunk, hook) == 0);
static_assert(sizeof(Chunk) == 40, "the header a fused small value pays for its chunk");

// What a heap block of `bytes` costs in glibc: its 8-byte size field in
// 16-byte steps below Chunk::kLargeAllocation, whole pages from there.
size_t heap_block_charge(size_t bytes);

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
  uint32_t index() const { return chunk_->index(); }

 private:
  Chunk* chunk_ = nullptr;
};

// Chunks collected under a lock and released after it (most operations
// touch one object of one chunk: no allocation).
using ChunkList = absl::InlinedVector<Chunk*, 4>;

}  // namespace tierkv::memory
