#include "memory/object.h"

#include <cstring>
#include <new>

namespace tierkv::memory {

static_assert(sizeof(Object) == 56, "the object block of a 16-byte key is 80 bytes");

Object* Object::create(std::string_view key, uint32_t chunk_count) {
  // The slot array first: if it cannot be had, nothing else is held.
  Chunk** many = chunk_count > 1 ? new Chunk*[chunk_count]() : nullptr;
  void* mem = ::operator new(sizeof(Object) + key.size(), std::nothrow);
  if (mem == nullptr) {
    delete[] many;
    throw std::bad_alloc();
  }
  auto* obj = new (mem) Object();
  obj->key_size = static_cast<uint32_t>(key.size());
  obj->chunk_count_ = chunk_count;
  if (many != nullptr) obj->many_ = many;
  if (!key.empty()) std::memcpy(static_cast<char*>(mem) + sizeof(Object), key.data(), key.size());
  return obj;
}

void Object::destroy(Object* obj) {
  if (obj->chunk_count_ > 1) delete[] obj->many_;
  obj->~Object();
  ::operator delete(static_cast<void*>(obj));
}

int64_t Object::metadata_charge(size_t key_size, size_t chunk_count) {
  auto n = static_cast<int64_t>(heap_block_charge(sizeof(Object) + key_size));
  if (chunk_count > 1) n += static_cast<int64_t>(heap_block_charge(chunk_count * sizeof(Chunk*)));
  return n;
}

}  // namespace tierkv::memory
