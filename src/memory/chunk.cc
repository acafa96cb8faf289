#include "memory/chunk.h"

#include <new>

#include "memory/object.h"

namespace tierkv::memory {
namespace {

constexpr size_t kMallocHeader = 16;
constexpr size_t kPage = 4096;
// glibc serves requests from its mmap threshold up (128 KiB at first; it
// adapts upward) with their own pages; below it, from the heap in 16-byte
// steps. Charging 64 KiB values in whole pages wasted ~6% of the budget.
constexpr size_t kLargeAllocation = 128 * 1024;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

size_t Chunk::charge_for(uint32_t size) {
  size_t n = sizeof(Chunk) + size + kMallocHeader;
  return n < kLargeAllocation ? round_up(n, 16) : round_up(n, kPage);
}

Chunk* Chunk::allocate(uint32_t size, uint32_t charge, std::atomic<int64_t>* used) {
  void* mem = ::operator new(sizeof(Chunk) + size);
  Chunk* c = new (mem) Chunk();
  c->size = size;
  c->charge = charge;
  c->hook.bytes = charge;
  c->used = used;
  return c;
}

void Chunk::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  std::atomic<int64_t>* account = used;
  int64_t bytes = charge;
  this->~Chunk();
  ::operator delete(static_cast<void*>(this));
  account->fetch_sub(bytes, std::memory_order_relaxed);
}

int64_t Object::metadata_charge(size_t key_size, size_t chunk_count) {
  int64_t n = static_cast<int64_t>(sizeof(Object) + kMallocHeader);
  if (key_size > 15) n += static_cast<int64_t>(round_up(key_size + 1 + kMallocHeader, 16));
  if (chunk_count > 1)
    n += static_cast<int64_t>(round_up(chunk_count * sizeof(Chunk*) + kMallocHeader, 16));
  return n;
}

}  // namespace tierkv::memory
