// Object: the index entry for one version of one key. Internal to memory/.
#pragma once

#include <absl/container/inlined_vector.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "memory/chunk.h"
#include "memory/lower_tier.h"

namespace tierkv::memory {

struct Object {
  static constexpr uint32_t kNoTtlSlot = UINT32_MAX;

  std::string key;
  uint64_t hash = 0;
  uint64_t version = 0;
  uint64_t size = 0;
  int64_t expire_at_ms = 0;
  int64_t charge = 0;  // metadata bytes charged for this object
  uint32_t ttl_slot = kNoTtlSlot;
  FlashState flash_state = FlashState::kDirty;
  bool raw_encoding = false;  // WriteOptions::raw_encoding
  // Slot i is chunk i. A slot is null (a hole) only in a clean object: the
  // lower tier holds that chunk, and reads take it from there.
  absl::InlinedVector<Chunk*, 1> chunks;
  uint32_t resident = 0;  // non-null slots

  bool partial() const { return resident < chunks.size(); }

  // Metadata charge of an object with this key and chunk count.
  static int64_t metadata_charge(size_t key_size, size_t chunk_count);
};

}  // namespace tierkv::memory
