#include "flash/flash_index.h"

#include <malloc.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/hash.h"

namespace tierkv::flash {

std::string_view FlashIndex::Entry::key() const {
  return {reinterpret_cast<const char*>(block.get() + slots), key_length};
}

namespace {

// About 64 objects a bucket at the expected count.
unsigned bucket_bits_for(uint64_t expected_objects, uint32_t shards) {
  const uint64_t buckets = std::max<uint64_t>(expected_objects / shards / 64, 1);
  return std::min<unsigned>(std::bit_width(buckets - 1), CompactTable::kMaxBucketBits);
}

}  // namespace

FlashIndex::FlashIndex(uint32_t shards, uint64_t expected_objects, uint64_t hash_mask)
    : shard_count_(std::bit_ceil(std::max<uint32_t>(shards, 1))),
      bucket_bits_(bucket_bits_for(expected_objects, shard_count_)),
      compact_mask_(CompactTable::ident_mask(bucket_bits_) | (shard_count_ - 1)),
      hash_mask_(hash_mask) {
  shards_.reserve(shard_count_);
  for (uint32_t i = 0; i < shard_count_; ++i)
    shards_.push_back(std::make_unique<Shard>(bucket_bits_));
}

FlashIndex::~FlashIndex() = default;

uint64_t FlashIndex::key_hash(std::string_view key) const {
  return hash64(key) & hash_mask_;
}

size_t FlashIndex::block_bytes(uint32_t slots, uint32_t key_length) {
  return size_t{slots} * sizeof(uint64_t) + key_length;
}

// Allocator's real footprint for one block: usable size plus its header.
static size_t heap_footprint(const void* p) {
  return malloc_usable_size(const_cast<void*>(p)) + 8;
}

void FlashIndex::reset_entry(Shard& s, Entry& e, std::string_view key, uint64_t version,
                             uint64_t object_size, uint32_t slots) {
  if (e.block) s.block_bytes -= heap_footprint(e.block.get());
  s.chunks -= e.resident;
  const size_t words = (block_bytes(slots, key.size()) + 7) / 8;
  e.block.reset(new uint64_t[words]());
  std::memcpy(e.block.get() + slots, key.data(), key.size());
  s.block_bytes += heap_footprint(e.block.get());
  e.version = version;
  e.object_size = object_size;
  e.key_length = static_cast<uint32_t>(key.size());
  e.slots = slots;
  e.resident = 0;
  s.max_version = std::max(s.max_version, version);
}

void FlashIndex::resize_block(Shard& s, Entry& e, uint32_t slots) {
  const size_t words = (block_bytes(slots, e.key_length) + 7) / 8;
  std::unique_ptr<uint64_t[]> block(new uint64_t[words]());
  std::memcpy(block.get(), e.block.get(), size_t{e.slots} * sizeof(uint64_t));
  std::memcpy(block.get() + slots, e.block.get() + e.slots, e.key_length);
  s.block_bytes -= heap_footprint(e.block.get());
  s.block_bytes += heap_footprint(block.get());
  e.block = std::move(block);
  e.slots = slots;
}

void FlashIndex::erase_entry(Shard& s, absl::flat_hash_map<uint64_t, Entry>::iterator it) {
  Entry& e = it->second;
  s.chunks -= e.resident;
  s.block_bytes -= heap_footprint(e.block.get());
  // Swap-remove from the sampling array; the moved hash's entry learns its
  // new place.
  const uint64_t moved = s.sample.back();
  s.sample[e.sample_pos] = moved;
  s.sample.pop_back();
  if (moved != it->first) s.map.find(moved)->second.sample_pos = e.sample_pos;
  s.ordered.erase(it->first);
  s.map.erase(it);
}

void FlashIndex::erase_chunk(Shard& s, Entry& e, uint32_t chunk_index) {
  if (chunk_index >= e.slots || e.locations()[chunk_index] == 0) return;
  e.locations()[chunk_index] = 0;
  --e.resident;
  --s.chunks;
}

std::pair<FlashIndex::Entry*, bool> FlashIndex::find_or_insert(Shard& s, uint64_t key_hash) {
  auto [it, inserted] = s.map.try_emplace(key_hash);
  Entry& e = it->second;
  if (inserted) {
    e.sample_pos = static_cast<uint32_t>(s.sample.size());
    s.sample.push_back(key_hash);
    s.ordered.insert(key_hash);
  }
  return {&e, inserted};
}

FlashIndex::Entry* FlashIndex::keyed(Shard& s, std::string_view key, uint64_t key_hash) {
  auto it = s.map.find(key_hash);
  return it == s.map.end() || it->second.key() != key ? nullptr : &it->second;
}

void FlashIndex::erase_keyed(Shard& s, std::string_view key, uint64_t key_hash) {
  auto it = s.map.find(key_hash);
  if (it != s.map.end() && it->second.key() == key) erase_entry(s, it);
}

int64_t FlashIndex::compact_expiry(const Shard& s, uint64_t key_hash,
                                   const CompactTable::Entry& c) const {
  if (!c.has_expiry) return 0;
  auto it = s.compact_expiry.find(compact_ident(key_hash));
  return it == s.compact_expiry.end() ? 0 : it->second;
}

void FlashIndex::set_compact_expiry(Shard& s, uint64_t key_hash, CompactTable::Entry& c,
                                    int64_t expire_at_ms) {
  c.has_expiry = expire_at_ms != 0;
  if (c.has_expiry) {
    s.compact_expiry[compact_ident(key_hash)] = expire_at_ms;
  } else {
    s.compact_expiry.erase(compact_ident(key_hash));
  }
}

void FlashIndex::erase_compact(Shard& s, uint64_t key_hash) {
  if (s.compact.erase(key_hash)) s.compact_expiry.erase(compact_ident(key_hash));
}

bool FlashIndex::add_compact(Shard& s, std::string_view key, uint64_t key_hash, uint64_t version,
                             uint64_t object_size, uint64_t loc, int64_t expire_at_ms) {
  std::optional<CompactTable::Entry> old = s.compact.find(key_hash);
  if (old && version < old->version) return false;
  erase_keyed(s, key, key_hash);  // an older version of more chunks
  CompactTable::Entry c{location::place(loc), version, static_cast<uint32_t>(object_size), false};
  if (old && old->version == version) {
    c.has_expiry = old->has_expiry;  // the same version again: its expiry stands
    if (object_size == 0) c.size = old->size;
  } else {
    set_compact_expiry(s, key_hash, c, expire_at_ms);
  }
  s.compact.put(key_hash, c);
  s.max_version = std::max(s.max_version, version);
  return true;
}

void FlashIndex::widen_compact(Shard& s, std::string_view key, uint64_t key_hash,
                               const CompactTable::Entry& c, uint32_t slots) {
  const int64_t expiry = compact_expiry(s, key_hash, c);
  erase_compact(s, key_hash);
  auto [entry, inserted] = find_or_insert(s, key_hash);
  reset_entry(s, *entry, key, c.version, c.size, std::max<uint32_t>(slots, 1));
  entry->expire_at_ms = expiry;
  entry->locations()[0] = c.location;
  entry->resident = 1;
  ++s.chunks;
}

bool FlashIndex::add(std::string_view key, uint64_t key_hash, uint32_t chunk_index,
                     uint64_t version, uint64_t object_size, uint64_t loc,
                     uint32_t chunk_count_hint, int64_t expire_at_ms) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  const bool single =
      chunk_index == 0 && chunk_count_hint == 1 && CompactTable::fits(object_size, version);
  const Entry* known = keyed(s, key, key_hash);
  if (single && (known == nullptr || version > known->version)) {
    return add_compact(s, key, key_hash, version, object_size, loc, expire_at_ms);
  }
  const uint32_t wanted = std::max(chunk_index + 1, chunk_count_hint);
  if (known == nullptr) {
    if (std::optional<CompactTable::Entry> c = s.compact.find(key_hash)) {
      if (version < c->version) return false;
      if (version == c->version) {
        widen_compact(s, key, key_hash, *c, wanted);
      } else {
        erase_compact(s, key_hash);
      }
    }
  }
  auto [entry, inserted] = find_or_insert(s, key_hash);
  Entry& e = *entry;
  if (inserted || e.key() != key || version > e.version) {
    reset_entry(s, e, key, version, object_size, wanted);
    e.expire_at_ms = expire_at_ms;
  } else if (version < e.version) {
    return false;
  } else if (chunk_index >= e.slots) {
    // Unknown final count: grow geometrically so sequential adds stay cheap.
    resize_block(s, e, std::max(wanted, e.slots + e.slots / 2));
  }
  if (object_size != 0) e.object_size = object_size;
  uint64_t& slot = e.locations()[chunk_index];
  if (slot == 0) {
    ++e.resident;
    ++s.chunks;
  }
  slot = location::place(loc);
  return true;
}

bool FlashIndex::install(const EntryImage& image, uint64_t key_hash) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  const Entry* known = keyed(s, image.key, key_hash);
  std::optional<CompactTable::Entry> c = s.compact.find(key_hash);
  if ((known && known->version >= image.version) || (c && c->version >= image.version)) {
    return false;
  }
  if (image.locations.size() == 1 && image.locations[0] != 0 &&
      CompactTable::fits(image.object_size, image.version)) {
    return add_compact(s, image.key, key_hash, image.version, image.object_size, image.locations[0],
                       image.expire_at_ms);
  }
  if (c) erase_compact(s, key_hash);
  auto [entry, inserted] = find_or_insert(s, key_hash);
  Entry& e = *entry;
  reset_entry(s, e, image.key, image.version, image.object_size,
              static_cast<uint32_t>(image.locations.size()));
  e.expire_at_ms = image.expire_at_ms;
  for (size_t i = 0; i < image.locations.size(); ++i) {
    if (image.locations[i] == 0) continue;
    e.locations()[i] = location::place(image.locations[i]);
    ++e.resident;
    ++s.chunks;
  }
  return true;
}

std::optional<IndexedChunk> FlashIndex::lookup(std::string_view key, uint64_t key_hash,
                                               uint32_t chunk_index,
                                               std::optional<uint64_t> version, bool mark_hit) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  if (Entry* e = keyed(s, key, key_hash)) {
    if (chunk_index >= e->slots || (version && *version != e->version)) return std::nullopt;
    uint64_t& slot = e->locations()[chunk_index];
    if (slot == 0 || location::relocating(slot)) return std::nullopt;
    if (mark_hit) slot |= location::kHitBit;
    return IndexedChunk{location::place(slot), e->version, e->object_size, e->expire_at_ms};
  }
  std::optional<CompactTable::Entry> c = s.compact.find(key_hash);
  if (!c || chunk_index != 0 || (version && *version != c->version)) return std::nullopt;
  if (location::relocating(c->location)) return std::nullopt;
  if (mark_hit && !location::hit(c->location)) {
    c->location |= location::kHitBit;
    s.compact.put(key_hash, *c);
  }
  return IndexedChunk{location::place(c->location), c->version, c->size,
                      compact_expiry(s, key_hash, *c)};
}

std::optional<FlashObjectInfo> FlashIndex::object(std::string_view key, uint64_t key_hash) const {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  if (const Entry* e = keyed(s, key, key_hash)) {
    FlashObjectInfo info{e->version, e->object_size, {}, e->expire_at_ms};
    info.chunks.reserve(e->resident);
    for (uint32_t i = 0; i < e->slots; ++i) {
      const uint64_t slot = e->block[i];
      if (slot != 0 && !location::relocating(slot)) info.chunks.push_back(i);
    }
    return info;
  }
  std::optional<CompactTable::Entry> c = s.compact.find(key_hash);
  if (!c) return std::nullopt;
  FlashObjectInfo info{c->version, c->size, {}, compact_expiry(s, key_hash, *c)};
  if (!location::relocating(c->location)) info.chunks.push_back(0);
  return info;
}

bool FlashIndex::version_locations(std::string_view key, uint64_t key_hash, uint64_t version,
                                   std::vector<uint64_t>* locations, int64_t* expire_at_ms) const {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  if (const Entry* e = keyed(s, key, key_hash)) {
    if (e->version != version) return false;
    locations->assign(e->slots, 0);
    for (uint32_t i = 0; i < e->slots; ++i) {
      const uint64_t slot = e->block[i];
      if (slot != 0 && !location::relocating(slot)) (*locations)[i] = location::place(slot);
    }
    *expire_at_ms = e->expire_at_ms;
    return true;
  }
  std::optional<CompactTable::Entry> c = s.compact.find(key_hash);
  if (!c || c->version != version) return false;
  locations->assign(1, location::relocating(c->location) ? 0 : location::place(c->location));
  *expire_at_ms = compact_expiry(s, key_hash, *c);
  return true;
}

std::optional<FlashObjectSummary> FlashIndex::summary(std::string_view key,
                                                      uint64_t key_hash) const {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  if (const Entry* e = keyed(s, key, key_hash)) {
    FlashObjectSummary out{e->version, e->object_size, e->expire_at_ms, 0};
    for (uint32_t i = 0; i < e->slots; ++i) {
      const uint64_t slot = e->block[i];
      if (slot != 0 && !location::relocating(slot)) ++out.readable_chunks;
    }
    return out;
  }
  std::optional<CompactTable::Entry> c = s.compact.find(key_hash);
  if (!c) return std::nullopt;
  return FlashObjectSummary{c->version, c->size, compact_expiry(s, key_hash, *c),
                            location::relocating(c->location) ? 0u : 1u};
}

bool FlashIndex::has_chunks(std::string_view key, uint64_t key_hash, uint64_t version,
                            uint32_t chunk_count) const {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  if (const Entry* e = keyed(s, key, key_hash)) {
    if (e->version != version || chunk_count > e->slots) return false;
    for (uint32_t i = 0; i < chunk_count; ++i) {
      const uint64_t slot = e->block[i];
      if (slot == 0 || location::relocating(slot)) return false;
    }
    return true;
  }
  std::optional<CompactTable::Entry> c = s.compact.find(key_hash);
  if (!c || c->version != version || chunk_count > 1) return false;
  return chunk_count == 0 || !location::relocating(c->location);
}

bool FlashIndex::set_expiry(std::string_view key, uint64_t key_hash, uint64_t version,
                            int64_t expire_at_ms) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  if (Entry* e = keyed(s, key, key_hash)) {
    if (e->version != version) return false;
    e->expire_at_ms = expire_at_ms;
    return true;
  }
  std::optional<CompactTable::Entry> c = s.compact.find(key_hash);
  if (!c || c->version != version) return false;
  set_compact_expiry(s, key_hash, *c, expire_at_ms);
  s.compact.put(key_hash, *c);
  return true;
}

bool FlashIndex::remove(std::string_view key, uint64_t key_hash) {
  return remove_up_to(key, key_hash, UINT64_MAX);
}

bool FlashIndex::remove_up_to(std::string_view key, uint64_t key_hash, uint64_t max_version) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  auto it = s.map.find(key_hash);
  if (it != s.map.end() && it->second.key() == key) {
    if (it->second.version > max_version) return false;
    erase_entry(s, it);
    return true;
  }
  std::optional<CompactTable::Entry> c = s.compact.find(key_hash);
  if (!c || c->version > max_version) return false;
  erase_compact(s, key_hash);
  return true;
}

bool FlashIndex::drop_chunk(std::string_view key, uint64_t key_hash, uint32_t chunk_index,
                            uint64_t loc) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  auto it = s.map.find(key_hash);
  if (it != s.map.end() && it->second.key() == key) {
    Entry& e = it->second;
    if (chunk_index >= e.slots) return false;
    if (location::place(e.locations()[chunk_index]) != location::place(loc)) return false;
    erase_chunk(s, e, chunk_index);
    if (e.resident == 0) erase_entry(s, it);
    return true;
  }
  std::optional<CompactTable::Entry> c = s.compact.find(key_hash);
  if (!c || chunk_index != 0 || location::place(c->location) != location::place(loc)) return false;
  erase_compact(s, key_hash);
  return true;
}

bool FlashIndex::keep_in_place(std::string_view key, uint64_t key_hash, uint32_t chunk_index,
                               uint64_t loc) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  const auto still_marked = [&](uint64_t slot) {
    return location::relocating(slot) && location::place(slot) == location::place(loc);
  };
  if (Entry* e = keyed(s, key, key_hash)) {
    if (chunk_index >= e->slots || !still_marked(e->locations()[chunk_index])) return false;
    e->locations()[chunk_index] = location::place(loc);
    return true;
  }
  std::optional<CompactTable::Entry> c = s.compact.find(key_hash);
  if (!c || chunk_index != 0 || !still_marked(c->location)) return false;
  c->location = location::place(loc);
  s.compact.put(key_hash, *c);
  return true;
}

std::optional<int64_t> FlashIndex::relocating_expiry(std::string_view key, uint64_t key_hash,
                                                     uint32_t chunk_index, uint64_t version) const {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  if (const Entry* e = keyed(s, key, key_hash)) {
    if (e->version != version || chunk_index >= e->slots) return std::nullopt;
    if (!location::relocating(e->block[chunk_index])) return std::nullopt;
    return e->expire_at_ms;
  }
  std::optional<CompactTable::Entry> c = s.compact.find(key_hash);
  if (!c || c->version != version || chunk_index != 0 || !location::relocating(c->location)) {
    return std::nullopt;
  }
  return compact_expiry(s, key_hash, *c);
}

bool FlashIndex::relocate(std::string_view key, uint64_t key_hash, uint32_t chunk_index,
                          uint64_t version, uint64_t new_location) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  if (Entry* e = keyed(s, key, key_hash)) {
    if (e->version != version || chunk_index >= e->slots) return false;
    uint64_t& slot = e->locations()[chunk_index];
    if (!location::relocating(slot)) return false;
    slot = location::place(new_location) | location::kCopyBit;
    return true;
  }
  std::optional<CompactTable::Entry> c = s.compact.find(key_hash);
  if (!c || c->version != version || chunk_index != 0 || !location::relocating(c->location)) {
    return false;
  }
  c->location = location::place(new_location) | location::kCopyBit;
  s.compact.put(key_hash, *c);
  return true;
}

}  // namespace tierkv::flash
