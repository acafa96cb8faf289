// FlashTier::StagedObject: an object written chunk by chunk, seen whole or
// not at all.
//
// The chunks are ordinary records of the object's version, so nothing on
// the device tells a staged chunk from any other. What keeps them invisible
// is where their locations go when they land: into the StagingEntry, not
// the index. The last chunk is the commit. It may be queued only after every
// other chunk landed, and when it lands the whole entry goes into the index
// in one step (FlashIndex::install). On the device the same rule holds
// without any commit record: until the last chunk is written the version is
// incomplete, and recovery drops incomplete versions and keeps the one
// before.
//
// What must refuse the commit, and how each is seen:
// * a removal of the key since begin_staged(): the KeyHold keeps the key's
//   in-flight record alive, so the last chunk's landing sees the removal;
// * a newer version indexed meanwhile: install() refuses an older version;
// * clear(): the entry remembers the generation it began in;
// * a chunk whose write failed, or whose region was reclaimed before the
//   commit (reclaim_locked marks the entry lost before it drops the
//   region from the index, so an installed entry never points into a
//   reclaimed region).
#include <utility>

#include <fmt/format.h>

#include "core/hash.h"
#include "flash/flash_tier.h"
#include "flash/flash_tier_internal.h"

namespace tierkv::flash {

Result<FlashTier::StagedObject> FlashTier::begin_staged(const StagedObjectSpec& spec) {
  if (spec.key.empty()) return Status::invalid_argument("flash: empty key");
  if (spec.chunk_count == 0 || spec.version == 0) {
    return Status::invalid_argument("flash: a staged object needs a version and a chunk");
  }
  if (spec.chunk_count > location::kMaxBlocks) {
    return Status::too_large("flash: too many chunks for one object");
  }
  // Reclaim needs a free region and one being filled; an object that
  // cannot fit beside them would only push itself out.
  const uint64_t room = region_count_ > 2 ? (region_count_ - 2) * options_.region_size : 0;
  if (spec.object_size > room) {
    return Status::too_large(
        fmt::format("value of {} bytes is larger than the flash tier can hold ({} bytes)",
                    spec.object_size, room));
  }
  auto entry = std::make_shared<StagingEntry>();
  entry->key.assign(spec.key);
  entry->key_hash = impl_->index.key_hash(spec.key);
  entry->version = spec.version;
  entry->object_size = spec.object_size;
  entry->expire_at_ms = spec.expire_at_ms;
  entry->locations.assign(spec.chunk_count, 0);
  KeyHold hold = hold_key(spec.key);
  Impl& im = *impl_;
  {
    MutexLock lock(im.landing_mu);
    entry->generation = im.generation;
    im.staging.insert(entry.get());
  }
  return StagedObject(this, std::move(entry), std::move(hold));
}

FlashTier::StagedObject::StagedObject(FlashTier* tier, std::shared_ptr<StagingEntry> entry,
                                      KeyHold hold)
    : tier_(tier), entry_(std::move(entry)), hold_(std::move(hold)) {}

FlashTier::StagedObject::StagedObject(StagedObject&& o) noexcept
    : tier_(o.tier_), entry_(std::move(o.entry_)), hold_(std::move(o.hold_)) {}

FlashTier::StagedObject::~StagedObject() {
  if (!entry_) return;
  MutexLock lock(tier_->impl_->landing_mu);
  tier_->impl_->staging.erase(entry_.get());
}

Status FlashTier::StagedObject::write_chunk(uint32_t chunk_index, std::string_view data,
                                            WriteCallback done) {
  const auto count = static_cast<uint32_t>(entry_->locations.size());
  if (chunk_index >= count) {
    return Status::invalid_argument("flash: chunk index past the staged object's end");
  }
  int64_t expire_at_ms = 0;
  {
    MutexLock lock(tier_->impl_->landing_mu);
    expire_at_ms = entry_->expire_at_ms;
    if (chunk_index + 1 == count && entry_->lost) {
      return Status::conflict("flash: the staged object lost a chunk");
    }
    if (chunk_index + 1 == count &&
        (entry_->landed + 1 < count || entry_->locations[chunk_index] != 0)) {
      return Status::invalid_argument(
          "flash: the last chunk of a staged object goes after all the others landed");
    }
  }
  const ChunkWrite chunk{.key = entry_->key,
                         .chunk_index = chunk_index,
                         .version = entry_->version,
                         .object_size = entry_->object_size,
                         .chunk_count = count,
                         .data = data,
                         .expire_at_ms = expire_at_ms};
  std::vector<WriteCallback> callbacks;
  callbacks.push_back(std::move(done));
  return tier_->enqueue_writes(std::span(&chunk, 1), std::move(callbacks), entry_);
}

void FlashTier::StagedObject::set_expiry(int64_t expire_at_ms) {
  MutexLock lock(tier_->impl_->landing_mu);
  entry_->expire_at_ms = expire_at_ms;
}

uint32_t FlashTier::StagedObject::chunks_landed() const {
  MutexLock lock(tier_->impl_->landing_mu);
  return entry_->landed;
}

uint32_t FlashTier::StagedObject::chunk_count() const {
  return static_cast<uint32_t>(entry_->locations.size());
}

bool FlashTier::StagedObject::lost() const {
  MutexLock lock(tier_->impl_->landing_mu);
  return entry_->lost;
}

bool FlashTier::StagedObject::superseded() const {
  MutexLock lock(tier_->impl_->landing_mu);
  return entry_->superseded;
}

Status FlashTier::land_staged_locked(PendingChunk& chunk) {
  Impl& im = *impl_;
  im.landing_mu.assert_held();
  StagingEntry& s = *chunk.staging;
  if (s.generation != im.generation) s.lost = true;
  if (s.lost) return Status::conflict("flash: the staged object lost a chunk or was cleared");
  uint64_t& slot = s.locations[chunk.chunk_index];
  if (slot == 0) ++s.landed;
  slot = chunk.location;
  if (chunk.chunk_index + 1 < s.locations.size()) return Status::ok();
  if (s.landed != s.locations.size()) {
    s.lost = true;
    return Status::conflict("flash: the staged object's last chunk landed before the others");
  }
  for (uint64_t loc : s.locations) spoil_region_list_locked(loc);
  if (!im.index.install({s.key, s.version, s.object_size, s.expire_at_ms, s.locations},
                        s.key_hash)) {
    s.lost = s.superseded = true;
    return Status::conflict("flash: a newer version was written meanwhile");
  }
  return Status::ok();
}

void FlashTier::lose_staged_in_region_locked(uint32_t region) {
  impl_->landing_mu.assert_held();
  for (StagingEntry* e : impl_->staging) {
    for (uint64_t loc : e->locations) {
      if (loc != 0 && location::region(loc) == region) e->lost = true;
    }
  }
}

}  // namespace tierkv::flash
