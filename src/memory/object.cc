#include "memory/object.h"

#include <cstring>
#include <new>

namespace tierkv::memory {

static_assert(sizeof(Object) == 56, "the object block of a 16-byte key is 80 bytes");

Object* Object::create(std::string_view key, uint32_t chunk_count) {
  void* mem = ::operator new(sizeof(Object) + key.size());
  auto* obj = new (mem) Object();
  obj->key_size = static_cast<uint32_t>(key.size());
  obj->chunk_count_ = chunk_count;
  if (chunk_count > 1) obj->many_ = new Chunk*[chunk_count]();
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
