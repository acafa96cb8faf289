#include "memory/chunk.h"

#include <algorithm>
#include <array>
#include <new>
#include <stdexcept>

#include "core/mutex.h"

namespace tierkv::memory {

namespace {
// Slot 0 stays empty: id 0 means no counter.
std::array<std::atomic<std::atomic<int64_t>*>, 256> g_budget_counters{};
Mutex g_budget_mu;
}  // namespace

BudgetSlot::BudgetSlot(std::atomic<int64_t>* counter) : id_(0) {
  MutexLock lock(g_budget_mu);
  for (size_t i = 1; i < g_budget_counters.size(); ++i) {
    if (g_budget_counters[i].load() != nullptr) continue;
    g_budget_counters[i].store(counter);
    id_ = static_cast<uint8_t>(i);
    return;
  }
  throw std::length_error("more than 255 memory tiers in one process");
}

BudgetSlot::~BudgetSlot() {
  MutexLock lock(g_budget_mu);
  g_budget_counters[id_].store(nullptr);
}

std::atomic<int64_t>* BudgetSlot::counter(uint8_t id) {
  return g_budget_counters[id].load(std::memory_order_acquire);
}

size_t heap_block_charge(size_t bytes) {
  // glibc: a heap chunk is the request and its 8-byte size field in 16-byte
  // steps, 32 bytes at least; a mapped one has a 16-byte header and whole
  // pages. (A 16-byte header on heap chunks overcharged a small key's block
  // by 16 bytes in two cases of three.)
  constexpr size_t kSizeField = 8, kMinChunk = 32, kMappedHeader = 16, kPage = 4096;
  if (bytes + kMappedHeader >= Chunk::kLargeAllocation)
    return (bytes + kMappedHeader + kPage - 1) / kPage * kPage;
  return std::max(kMinChunk, (bytes + kSizeField + 15) / 16 * 16);
}

size_t Chunk::charge_for(uint32_t size) {
  return heap_block_charge(sizeof(SeparateChunk) + size);
}

size_t Chunk::charge_in_buffer(size_t buffer_size) {
  return heap_block_charge(sizeof(BufferedChunk)) + buffer_size;
}

Chunk* Chunk::allocate(uint32_t size, uint32_t charge, uint8_t budget_id) {
  void* mem = ::operator new(sizeof(SeparateChunk) + size);
  auto* c = new (mem) SeparateChunk();
  c->set_budget_id(budget_id);
  c->size = size;
  c->hook.bytes = charge;
  return c;
}

Chunk* Chunk::allocate_in(AlignedBuffer buffer, uint32_t offset, uint32_t size, uint32_t charge,
                          uint8_t budget_id) {
  auto* c = new BufferedChunk();
  c->set_budget_id(budget_id);
  c->size = size;
  c->hook.bytes = charge;
  c->in_buffer = 1;
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

}  // namespace tierkv::memory
