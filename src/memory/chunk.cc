#include "memory/chunk.h"

#include <new>

#include "memory/object.h"

namespace tierkv::memory {
namespace {

constexpr size_t kMallocHeader = 16;
constexpr size_t kPage = 4096;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

size_t Chunk::charge_for(uint32_t size) {
  size_t n = sizeof(Chunk) + size + kMallocHeader;
  return n < kLargeAllocation ? round_up(n, 16) : round_up(n, kPage);
}

size_t Chunk::charge_in_buffer(size_t buffer_size) {
  return charge_for(0) + buffer_size;
}

Chunk* Chunk::allocate(uint32_t size, uint32_t charge, std::atomic<int64_t>* used) {
  void* mem = ::operator new(sizeof(Chunk) + size);
  Chunk* c = new (mem) Chunk();
  c->size = size;
  c->charge = charge;
  c->hook.bytes = charge;
  c->used = used;
  c->bytes = reinterpret_cast<char*>(c + 1);
  return c;
}

Chunk* Chunk::allocate_in(AlignedBuffer buffer, uint32_t offset, uint32_t size, uint32_t charge,
                          std::atomic<int64_t>* used) {
  Chunk* c = allocate(0, charge, used);
  c->size = size;
  c->buffer = std::move(buffer);
  c->bytes = c->buffer.data() + offset;
  return c;
}

bool Chunk::adopt(AlignedBuffer& from, uint32_t offset) {
  // An inline chunk keeps its allocation: only a buffer is swapped.
  if (buffer.empty() || from.size() > charge || offset + uint64_t{size} > from.size()) return false;
  buffer = std::move(from);
  from.reset();  // the old bytes, now in `from`
  bytes = buffer.data() + offset;
  return true;
}

void Chunk::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // Credited before the bytes go: a pooled buffer is kept only while the
  // budget has room for it.
  used->fetch_sub(charge, std::memory_order_relaxed);
  this->~Chunk();
  ::operator delete(static_cast<void*>(this));
}

int64_t Object::metadata_charge(size_t key_size, size_t chunk_count) {
  int64_t n = static_cast<int64_t>(sizeof(Object) + kMallocHeader);
  if (key_size > 15) n += static_cast<int64_t>(round_up(key_size + 1 + kMallocHeader, 16));
  if (chunk_count > 1)
    n += static_cast<int64_t>(round_up(chunk_count * sizeof(Chunk*) + kMallocHeader, 16));
  return n;
}

}  // namespace tierkv::memory
