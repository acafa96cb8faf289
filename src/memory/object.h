// Object: the index entry for one version of one key. Internal to memory/.
// Two layouts behind one interface:
// * fused: a value that fits one inline chunk (under Chunk::kPooledMin
//   and chunk_size) with a key under 64 KiB. One heap block holds
//   [Chunk][Object][key][value]: 52 bytes of header, so a 16-byte key with a
//   100-byte value is one 176-byte glibc block (two blocks of 80 and 176
//   bytes before). The chunk owns the block: the index holds its reference,
//   pins hold more, and the last release frees chunk and object together.
//   The object's hash is the chunk's hook id; it is never partial.
// * separate: [Object][fields][key] in one block, its chunks in blocks of
//   their own; a clean one may have holes (chunks the lower tier holds).
// The expiry is not here: a shard keeps it for the objects that have one
// (Redis's expires dict), so objects without a TTL pay nothing for it.
#pragma once

#include <cstdint>
#include <string_view>

#include "memory/chunk.h"
#include "memory/lower_tier.h"

namespace tierkv::memory {

struct Object {
 private:
  // The version in two words keeps the header 4-byte aligned at 12 bytes,
  // so that a fused object's key follows the 40-byte chunk at byte 52.
  uint32_t version_lo_ = 0;
  uint32_t version_hi_ = 0;
  uint16_t fused_key_size_ = 0;
  bool fused_ = false;

 public:
  FlashState flash_state : 2 = FlashState::kDirty;
  bool raw_encoding : 1 = false;  // WriteOptions::raw_encoding
  bool has_ttl : 1 = false;       // the shard's TTL table holds its expiry

  uint64_t version() const { return (uint64_t{version_hi_} << 32) | version_lo_; }
  void set_version(uint64_t v) {
    version_lo_ = static_cast<uint32_t>(v);
    version_hi_ = static_cast<uint32_t>(v >> 32);
  }
  bool fused() const { return fused_; }
  uint64_t hash() const { return fused_ ? fused_chunk()->hook.id : separate()->hash; }
  uint64_t size() const { return fused_ ? fused_chunk()->size : separate()->size; }
  std::string_view key() const;
  uint32_t chunk_count() const { return fused_ ? 1 : separate()->chunk_count; }
  // Chunk i; null (a hole) only in a clean separate object: the lower tier
  // holds that chunk, and reads take it from there.
  Chunk* chunk(size_t i) const;
  // Separate objects only.
  void set_chunk(size_t i, Chunk* c);
  uint32_t resident() const { return fused_ ? 1 : separate()->resident; }
  void set_resident(uint32_t n) { separate()->resident = n; }
  bool partial() const { return resident() < chunk_count(); }
  // Metadata bytes charged for this object apart from its chunks: its
  // block and slot array (0 when fused: the chunk's charge covers both).
  int64_t charge() const;

  // The chunks in order (holes as null), for range-for.
  class Chunks {
   public:
    class iterator {
     public:
      iterator(const Object* o, size_t i) : o_(o), i_(i) {}
      Chunk* operator*() const { return o_->chunk(i_); }
      iterator& operator++() {
        ++i_;
        return *this;
      }
      bool operator!=(const iterator& other) const { return i_ != other.i_; }

     private:
      const Object* o_;
      size_t i_;
    };
    explicit Chunks(const Object* o) : o_(o) {}
    iterator begin() const { return {o_, 0}; }
    iterator end() const { return {o_, o_->chunk_count()}; }
    size_t size() const { return o_->chunk_count(); }

   private:
    const Object* o_;
  };
  Chunks chunks() const { return Chunks(this); }

  // True if a value of this size with this key is held fused.
  static bool fits_fused(size_t key_size, uint64_t value_size, uint32_t chunk_size);
  // What a fused object costs the budget (policy overhead aside).
  static size_t fused_charge(size_t key_size, uint64_t value_size);
  // A fused object for `key` with room for `value_size` bytes, returned as
  // its chunk (c->owner() is null until published: attach()). `charge` is
  // already reserved in the budget of `budget_id`.
  static Chunk* create_fused(std::string_view key, uint64_t hash, uint32_t value_size,
                             uint32_t charge, uint8_t budget_id);
  // The object of a fused chunk (published or not).
  static Object* of_fused(Chunk* c) { return reinterpret_cast<Object*>(c + 1); }
  // A separate object for `key` (copied in) with `chunk_count` empty slots.
  static Object* create(std::string_view key, uint64_t hash, uint64_t size, uint32_t chunk_count);
  // Frees a separate object; a fused one goes with its chunk's last release.
  static void destroy(Object* obj);
  // Metadata charge of a separate object with this key and chunk count.
  static int64_t metadata_charge(size_t key_size, size_t chunk_count);

  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;

 private:
  friend struct Chunk;
  struct Separate {
    uint64_t hash = 0;
    uint64_t size = 0;
    uint32_t key_size = 0;
    uint32_t resident = 0;  // non-null chunk slots
    uint32_t chunk_count = 0;
    // One slot (most objects) is held in place; more take a heap array.
    union {
      Chunk* one = nullptr;
      Chunk** many;
    };
  };
  static constexpr size_t kSeparateOffset = 16;

  Object() = default;
  ~Object() = default;
  Chunk* fused_chunk() const {
    return reinterpret_cast<Chunk*>(const_cast<char*>(reinterpret_cast<const char*>(this)) -
                                    sizeof(Chunk));
  }
  Separate* separate() const {
    return reinterpret_cast<Separate*>(const_cast<char*>(reinterpret_cast<const char*>(this)) +
                                       kSeparateOffset);
  }
};

}  // namespace tierkv::memory
