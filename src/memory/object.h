// Object: the index entry for one version of one key. Internal to memory/.
// One allocation holds the fields and the key after them: a small key costs
// its bytes and no second block (a std::string paid 32 bytes in the object
// and a heap block for any key over 15 bytes). The fields are packed to 56
// bytes, so that the object block of a 16-byte key is glibc's 80-byte size.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "memory/chunk.h"
#include "memory/lower_tier.h"

namespace tierkv::memory {

struct Object {
  // Positions in a shard's with_ttl list fit in 29 bits (536 M objects with
  // a TTL per shard); the top value means none.
  static constexpr uint32_t kNoTtlSlot = (1u << 29) - 1;

  uint64_t hash = 0;
  uint64_t version = 0;
  uint64_t size = 0;
  int64_t expire_at_ms = 0;
  uint32_t resident = 0;  // non-null chunk slots
  uint32_t key_size = 0;
  uint32_t ttl_slot : 29 = kNoTtlSlot;
  FlashState flash_state : 2 = FlashState::kDirty;
  bool raw_encoding : 1 = false;  // WriteOptions::raw_encoding

  std::string_view key() const { return {reinterpret_cast<const char*>(this + 1), key_size}; }
  // Slot i is chunk i. A slot is null (a hole) only in a clean object: the
  // lower tier holds that chunk, and reads take it from there.
  std::span<Chunk*> chunks() { return {chunk_data(), chunk_count_}; }
  std::span<Chunk* const> chunks() const { return {chunk_data(), chunk_count_}; }
  bool partial() const { return resident < chunk_count_; }
  // Metadata bytes charged for this object (its block and slot array).
  int64_t charge() const { return metadata_charge(key_size, chunk_count_); }

  // An object for `key` (copied in) with `chunk_count` empty slots.
  static Object* create(std::string_view key, uint32_t chunk_count);
  static void destroy(Object* obj);
  // Metadata charge of an object with this key and chunk count.
  static int64_t metadata_charge(size_t key_size, size_t chunk_count);

  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;

 private:
  Object() = default;
  ~Object() = default;
  Chunk** chunk_data() { return chunk_count_ > 1 ? many_ : &one_; }
  Chunk* const* chunk_data() const { return chunk_count_ > 1 ? many_ : &one_; }

  uint32_t chunk_count_ = 0;
  // One slot (most objects) is held in place; more take a heap array.
  union {
    Chunk* one_ = nullptr;
    Chunk** many_;
  };
};

}  // namespace tierkv::memory
