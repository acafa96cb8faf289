#include "memory/object.h"

#include <cstring>
#include <new>

namespace tierkv::memory {

static_assert(sizeof(Object) == 12 && alignof(Object) <= 8,
              "a fused object's header is the chunk's 40 bytes and these 12");

namespace {
constexpr size_t kFusedHeader = sizeof(Chunk) + sizeof(Object);
constexpr size_t kMaxFusedKey = UINT16_MAX;
}  // namespace

std::string_view Object::key() const {
  const char* base = reinterpret_cast<const char*>(this);
  if (fused_) return {base + sizeof(Object), fused_key_size_};
  return {base + kSeparateOffset + sizeof(Separate), separate()->key_size};
}

Chunk* Object::chunk(size_t i) const {
  if (fused_) return fused_chunk();
  const Separate* s = separate();
  return s->chunk_count > 1 ? s->many[i] : s->one;
}

void Object::set_chunk(size_t i, Chunk* c) {
  Separate* s = separate();
  (s->chunk_count > 1 ? s->many[i] : s->one) = c;
}

int64_t Object::charge() const {
  return fused_ ? 0 : metadata_charge(separate()->key_size, separate()->chunk_count);
}

bool Object::fits_fused(size_t key_size, uint64_t value_size, uint32_t chunk_size) {
  return key_size <= kMaxFusedKey && value_size < chunk_size && value_size < Chunk::kPooledMin;
}

size_t Object::fused_charge(size_t key_size, uint64_t value_size) {
  return heap_block_charge(kFusedHeader + key_size + value_size);
}

Chunk* Object::create_fused(std::string_view key, uint64_t hash, uint32_t value_size,
                            uint32_t charge, uint8_t budget_id) {
  char* block = static_cast<char*>(::operator new(kFusedHeader + key.size() + value_size));
  auto* c = new (block) Chunk();
  c->set_budget_id(budget_id);
  c->size = value_size;
  c->fused = 1;
  c->hook.bytes = charge;
  c->hook.id = hash;
  c->flags() = Chunk::kDetached;  // until publish() indexes it
  auto* obj = new (block + sizeof(Chunk)) Object();
  obj->fused_ = true;
  obj->fused_key_size_ = static_cast<uint16_t>(key.size());
  if (!key.empty()) std::memcpy(block + kFusedHeader, key.data(), key.size());
  return c;
}

Object* Object::create(std::string_view key, uint64_t hash, uint64_t size, uint32_t chunk_count) {
  // The slot array first: if it cannot be had, nothing else is held.
  Chunk** many = chunk_count > 1 ? new Chunk*[chunk_count]() : nullptr;
  const size_t header = kSeparateOffset + sizeof(Separate);
  void* mem = ::operator new(header + key.size(), std::nothrow);
  if (mem == nullptr) {
    delete[] many;
    throw std::bad_alloc();
  }
  auto* obj = new (mem) Object();
  Separate* s = new (static_cast<char*>(mem) + kSeparateOffset) Separate();
  s->hash = hash;
  s->size = size;
  s->key_size = static_cast<uint32_t>(key.size());
  s->chunk_count = chunk_count;
  if (many != nullptr) s->many = many;
  if (!key.empty()) std::memcpy(static_cast<char*>(mem) + header, key.data(), key.size());
  return obj;
}

void Object::destroy(Object* obj) {
  if (obj->fused_) return;
  Separate* s = obj->separate();
  if (s->chunk_count > 1) delete[] s->many;
  s->~Separate();
  obj->~Object();
  ::operator delete(static_cast<void*>(obj));
}

int64_t Object::metadata_charge(size_t key_size, size_t chunk_count) {
  auto n = static_cast<int64_t>(heap_block_charge(kSeparateOffset + sizeof(Separate) + key_size));
  if (chunk_count > 1) n += static_cast<int64_t>(heap_block_charge(chunk_count * sizeof(Chunk*)));
  return n;
}

// --- the chunk side of a fused object ---

uint32_t Chunk::index() const {
  return fused ? 0 : static_cast<const SeparateChunk*>(this)->index;
}

Object* Chunk::owner() const {
  if (!fused) return static_cast<const SeparateChunk*>(this)->owner;
  if (flags() & kDetached) return nullptr;
  return Object::of_fused(const_cast<Chunk*>(this));
}

void Chunk::set_owner(Object* obj) {
  if (fused) {
    flags() &= static_cast<uint8_t>(~kDetached);
  } else {
    static_cast<SeparateChunk*>(this)->owner = obj;
  }
}

void Chunk::detach() {
  if (fused) {
    flags() |= kDetached;
  } else {
    static_cast<SeparateChunk*>(this)->owner = nullptr;
  }
}

char* Chunk::data() {
  if (in_buffer) return static_cast<BufferedChunk*>(this)->bytes;
  if (!fused) return reinterpret_cast<char*>(static_cast<SeparateChunk*>(this) + 1);
  Object* obj = Object::of_fused(this);
  return reinterpret_cast<char*>(obj) + sizeof(Object) + obj->fused_key_size_;
}

void Chunk::release() {
  if ((refs_word.fetch_sub(1, std::memory_order_acq_rel) & kCountMask) != 1) return;
  // Credited before the bytes go: a pooled buffer is kept only while the
  // budget has room for it.
  if (std::atomic<int64_t>* used = BudgetSlot::counter(refs_word.load() >> 24))
    used->fetch_sub(charge(), std::memory_order_relaxed);
  if (in_buffer) {
    delete static_cast<BufferedChunk*>(this);
  } else if (fused) {
    Object::of_fused(this)->~Object();
    this->~Chunk();
    ::operator delete(static_cast<void*>(this));
  } else {
    static_cast<SeparateChunk*>(this)->~SeparateChunk();
    ::operator delete(static_cast<void*>(this));
  }
}

}  // namespace tierkv::memory
