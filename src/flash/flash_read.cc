// FlashTier's reads: the index lookups and region pins; the device reads,
// their queueing and verification are the ChunkReader's (chunk_reader.h).
// Writes: flash_tier.cc.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/hash.h"
#include "flash/exact_io.h"
#include "flash/flash_tier.h"
#include "flash/flash_tier_internal.h"
#include "flash/record.h"

namespace tierkv::flash {

Status FlashTier::read_chunk(std::string_view key, uint32_t chunk_index,
                             std::optional<uint64_t> version, ReadCallback done) {
  std::unique_ptr<ChunkRead> read = prepare_read(key, chunk_index, version);
  if (!read) return Status::not_found("chunk not on flash");
  read->done = std::move(done);
  impl_->reader->submit(std::span(&read, 1));
  return Status::ok();
}

void FlashTier::read_chunks(std::string_view key, std::span<const uint32_t> chunk_indexes,
                            std::optional<uint64_t> version, ChunkReadCallback done,
                            const VersionLocations* known, ReadPriority priority) {
  std::vector<std::unique_ptr<ChunkRead>> reads;
  for (uint32_t index : chunk_indexes) {
    std::unique_ptr<ChunkRead> read = prepare_read(key, index, version, known);
    if (!read) {
      done(index, Status::not_found("chunk not on flash"));
      continue;
    }
    read->done = [done, index](Result<FlashChunk> r) { done(index, std::move(r)); };
    read->priority = priority;
    reads.push_back(std::move(read));
  }
  if (!reads.empty()) impl_->reader->submit(reads);
}

std::optional<FlashTier::VersionLocations> FlashTier::locate_version(std::string_view key,
                                                                     uint64_t version,
                                                                     Pinning pinning) const {
  Impl& im = *impl_;
  const uint64_t key_hash = impl_->index.key_hash(key);
  VersionLocations out;
  // Taken before the lookup, as for a read (see reclaim_locked()).
  auto lookup = [&] {
    out.reclaim_epoch = im.reclaim_epoch.load(std::memory_order_acquire);
    return im.index.version_locations(key, key_hash, version, &out.locations, &out.expire_at_ms);
  };
  out.version = version;
  if (pinning == Pinning::kNone) return lookup() ? std::optional(std::move(out)) : std::nullopt;
  // See reclaim_locked(): the lookup and the pins are one step for it.
  MutexLock pins(im.regions.pin_mutex());
  if (!lookup()) return std::nullopt;
  std::vector<uint32_t>& regions = out.pins.regions_;
  for (uint64_t where : out.locations) {
    if (where == 0) continue;
    const uint32_t region = location::region(where);
    if (std::find(regions.begin(), regions.end(), region) != regions.end()) continue;
    regions.push_back(region);
    im.regions.pin_locked(region);
  }
  out.pins.tier_ = this;
  return out;
}

FlashTier::RegionPins::RegionPins(RegionPins&& other) noexcept
    : tier_(std::exchange(other.tier_, nullptr)), regions_(std::move(other.regions_)) {
  other.regions_.clear();
}

FlashTier::RegionPins& FlashTier::RegionPins::operator=(RegionPins&& other) noexcept {
  if (this != &other) {
    reset();
    tier_ = std::exchange(other.tier_, nullptr);
    regions_ = std::move(other.regions_);
    other.regions_.clear();
  }
  return *this;
}

void FlashTier::RegionPins::reset() {
  if (tier_ != nullptr && !regions_.empty()) tier_->unpin_regions(regions_);
  tier_ = nullptr;
  regions_.clear();
}

std::unique_ptr<ChunkRead> FlashTier::prepare_read(std::string_view key, uint32_t chunk_index,
                                                   std::optional<uint64_t> version,
                                                   const VersionLocations* known) {
  Impl& im = *impl_;
  const uint64_t key_hash = impl_->index.key_hash(key);
  // Taken before the lookup: see reclaim_locked().
  const uint64_t epoch = im.reclaim_epoch.load(std::memory_order_acquire);
  auto found = im.index.lookup(key, key_hash, chunk_index, version, options_.reinsertion);
  if (!found && known != nullptr && (!version || known->version == *version) &&
      chunk_index < known->locations.size() && known->locations[chunk_index] != 0) {
    // Replaced in the index since `known` was taken: its record, if its
    // region was not reclaimed since, is still this version's chunk.
    const IndexedChunk then{known->locations[chunk_index], known->version, 0, known->expire_at_ms};
    return im.reader->prepare(key, key_hash, chunk_index, then, known->reclaim_epoch);
  }
  if (!found) {
    im.metrics.read_misses.add();
    return nullptr;
  }
  return im.reader->prepare(key, key_hash, chunk_index, *found, epoch);
}

std::optional<std::string> FlashTier::read_key_at(uint64_t loc) const {
  const location::ReadSpan span = location::read_span(loc, kBlockSize);
  const uint64_t offset = region_start(location::region(loc)) + span.start;
  AlignedBuffer buffer(span.length);
  if (!read_exact(impl_->fd.get(), buffer.data(), span.length, offset).is_ok()) return std::nullopt;
  Result<RecordView> rec = decode_record(buffer.data() + span.skew, span.length - span.skew,
                                         {salt(), offset + span.skew});
  if (!rec.is_ok()) return std::nullopt;
  return std::string(rec->key);
}

void FlashTier::wait_reads_idle() {
  if (impl_->reader) impl_->reader->wait_idle();
}

}  // namespace tierkv::flash
