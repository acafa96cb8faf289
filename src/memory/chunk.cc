#include "memory/chunk.h"

#include <new>

namespace tierkv::memory {

size_t heap_block_charge(size_t bytes) {
  constexpr size_t kMallocHeader = 16;
  constexpr size_t kPage = 4096;
  const size_t n = bytes + kMallocHeader;
  const size_t step = n < Chunk::kLargeAllocation ? 16 : kPage;
  return (n + step - 1) / step * step;
}

size_t Chunk::charge_for(uint32_t size) {
  return heap_block_charge(sizeof(Chunk) + size);
}

size_t Chunk::charge_in_buffer(size_t buffer_size) {
  return heap_block_charge(sizeof(BufferedChunk)) + buffer_size;
}

Chunk* Chunk::allocate(uint32_t size, uint32_t charge, std::atomic<int64_t>* used) {
  void* mem = ::operator new(sizeof(Chunk) + size);
  Chunk* c = new (mem) Chunk();
  c->size = size;
  c->hook.bytes = charge;
  c->used = used;
  return c;
}

Chunk* Chunk::allocate_in(AlignedBuffer buffer, uint32_t offset, uint32_t size, uint32_t charge,
                          std::atomic<int64_t>* used) {
  auto* c = new BufferedChunk();
  c->size = size;
  c->hook.bytes = charge;
  c->used = used;
  c->in_buffer = true;
  c->buffer = std::move(buffer);
  c->bytes = c->buffer.data() + offset;
  return c;
}

bool Chunk::adopt(AlignedBuffer& from, uint32_t offset) {
  // An inline chunk keeps its allocation: only a buffer is swapped.
  if (!in_buffer) return false;
  auto* self = static_cast<BufferedChunk*>(this);
  if (from.size() > charge() || offset + uint64_t{size} > from.size()) return false;
  self->buffer = std::move(from);
  from.reset();  // the old bytes, now in `from`
  self->bytes = self->buffer.data() + offset;
  return true;
}

void Chunk::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // Credited before the bytes go: a pooled buffer is kept only while the
  // budget has room for it.
  used->fetch_sub(charge(), std::memory_order_relaxed);
  if (in_buffer) {
    delete static_cast<BufferedChunk*>(this);
    return;
  }
  this->~Chunk();
  ::operator delete(static_cast<void*>(this));
}

}  // namespace tierkv::memory
