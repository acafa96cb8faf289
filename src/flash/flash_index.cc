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

FlashIndex::FlashIndex(uint32_t shards)
    : shard_count_(std::bit_ceil(std::max<uint32_t>(shards, 1))),
      shards_(new Shard[shard_count_]) {}

FlashIndex::~FlashIndex() = default;

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

void FlashIndex::for_each_entry(const std::function<void(const EntryImage&)>& fn) const {
  std::vector<uint64_t> places;
  for (uint32_t i = 0; i < shard_count_; ++i) {
    Shard& s = shards_[i];
    MutexLock lock(s.mu);
    for (const auto& [hash, e] : s.map) {
      places.assign(e.block.get(), e.block.get() + e.slots);
      for (uint64_t& p : places) p = location::relocating(p) ? 0 : location::place(p);
      fn(EntryImage{e.key(), e.version, e.object_size, e.expire_at_ms, places});
    }
  }
}

void FlashIndex::restore(const EntryImage& image) {
  const uint64_t key_hash = hash64(image.key);
  const auto slots = static_cast<uint32_t>(image.locations.size());
  for (uint32_t c = 0; c < slots; ++c) {
    if (image.locations[c] == 0) continue;
    add(image.key, key_hash, c, image.version, image.object_size, image.locations[c], slots,
        image.expire_at_ms);
  }
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

bool FlashIndex::add(std::string_view key, uint64_t key_hash, uint32_t chunk_index,
                     uint64_t version, uint64_t object_size, uint64_t loc,
                     uint32_t chunk_count_hint, int64_t expire_at_ms) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  const uint32_t wanted = std::max(chunk_index + 1, chunk_count_hint);
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
  auto [entry, inserted] = find_or_insert(s, key_hash);
  Entry& e = *entry;
  if (!inserted && e.key() == image.key && e.version >= image.version) return false;
  reset_entry(s, e, image.key, image.version, image.object_size,
              static_cast<uint32_t>(image.locations.size()));
  e.expire_at_ms = image.expire_at_ms;
  for (size_t c = 0; c < image.locations.size(); ++c) {
    if (image.locations[c] == 0) continue;
    e.locations()[c] = location::place(image.locations[c]);
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
  auto it = s.map.find(key_hash);
  if (it == s.map.end()) return std::nullopt;
  Entry& e = it->second;
  if (e.key() != key || chunk_index >= e.slots) return std::nullopt;
  if (version && *version != e.version) return std::nullopt;
  uint64_t& slot = e.locations()[chunk_index];
  if (slot == 0 || location::relocating(slot)) return std::nullopt;
  if (mark_hit) slot |= location::kHitBit;
  return IndexedChunk{location::place(slot), e.version, e.object_size, e.expire_at_ms};
}

std::optional<FlashObjectInfo> FlashIndex::object(std::string_view key, uint64_t key_hash) const {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  auto it = s.map.find(key_hash);
  if (it == s.map.end() || it->second.key() != key) return std::nullopt;
  const Entry& e = it->second;
  FlashObjectInfo info{e.version, e.object_size, {}, e.expire_at_ms};
  info.chunks.reserve(e.resident);
  for (uint32_t i = 0; i < e.slots; ++i) {
    const uint64_t slot = e.block[i];
    if (slot != 0 && !location::relocating(slot)) info.chunks.push_back(i);
  }
  return info;
}

bool FlashIndex::version_locations(std::string_view key, uint64_t key_hash, uint64_t version,
                                   std::vector<uint64_t>* locations, int64_t* expire_at_ms) const {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  auto it = s.map.find(key_hash);
  if (it == s.map.end() || it->second.key() != key || it->second.version != version) return false;
  const Entry& e = it->second;
  locations->assign(e.slots, 0);
  for (uint32_t i = 0; i < e.slots; ++i) {
    const uint64_t slot = e.block[i];
    if (slot != 0 && !location::relocating(slot)) (*locations)[i] = location::place(slot);
  }
  *expire_at_ms = e.expire_at_ms;
  return true;
}

std::optional<FlashObjectSummary> FlashIndex::summary(std::string_view key,
                                                      uint64_t key_hash) const {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  auto it = s.map.find(key_hash);
  if (it == s.map.end() || it->second.key() != key) return std::nullopt;
  const Entry& e = it->second;
  FlashObjectSummary out{e.version, e.object_size, e.expire_at_ms, 0};
  for (uint32_t i = 0; i < e.slots; ++i) {
    const uint64_t slot = e.block[i];
    if (slot != 0 && !location::relocating(slot)) ++out.readable_chunks;
  }
  return out;
}

bool FlashIndex::has_chunks(std::string_view key, uint64_t key_hash, uint64_t version,
                            uint32_t chunk_count) const {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  auto it = s.map.find(key_hash);
  if (it == s.map.end() || it->second.key() != key) return false;
  const Entry& e = it->second;
  if (e.version != version || chunk_count > e.slots) return false;
  for (uint32_t i = 0; i < chunk_count; ++i) {
    const uint64_t slot = e.block[i];
    if (slot == 0 || location::relocating(slot)) return false;
  }
  return true;
}

bool FlashIndex::set_expiry(std::string_view key, uint64_t key_hash, uint64_t version,
                            int64_t expire_at_ms) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  auto it = s.map.find(key_hash);
  if (it == s.map.end() || it->second.key() != key || it->second.version != version) return false;
  it->second.expire_at_ms = expire_at_ms;
  return true;
}

bool FlashIndex::remove(std::string_view key, uint64_t key_hash) {
  return remove_up_to(key, key_hash, UINT64_MAX);
}

bool FlashIndex::remove_up_to(std::string_view key, uint64_t key_hash, uint64_t max_version) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  auto it = s.map.find(key_hash);
  if (it == s.map.end() || it->second.key() != key || it->second.version > max_version) {
    return false;
  }
  erase_entry(s, it);
  return true;
}

std::vector<std::string> FlashIndex::keys_in_shard(uint32_t shard) const {
  std::vector<std::string> keys;
  if (shard >= shard_count_) return keys;
  const Shard& s = shards_[shard];
  MutexLock lock(s.mu);
  keys.reserve(s.map.size());
  for (const auto& [hash, e] : s.map) keys.emplace_back(e.key());
  return keys;
}

std::vector<std::string> FlashIndex::keys_from(uint64_t from, size_t max, uint64_t* next) const {
  max = std::max<size_t>(max, 1);
  // First the hashes only: up to `max` per shard. Every hash below `bound`
  // (the lowest one a shard left out) was seen.
  std::vector<uint64_t> hashes;
  uint64_t bound = 0;  // 0: no shard left any out
  for (uint32_t i = 0; i < shard_count_; ++i) {
    const Shard& s = shards_[i];
    MutexLock lock(s.mu);
    auto it = s.ordered.lower_bound(from);
    for (size_t n = 0; it != s.ordered.end() && n < max; ++it, ++n) hashes.push_back(*it);
    if (it != s.ordered.end() && (bound == 0 || *it < bound)) bound = *it;
  }
  uint64_t cut = bound;
  if (hashes.size() > max) {
    std::nth_element(hashes.begin(), hashes.begin() + static_cast<ptrdiff_t>(max), hashes.end());
    if (cut == 0 || hashes[max] < cut) cut = hashes[max];
  }
  // Then the keys of [from, cut): `max` of them (more only if keys came in
  // meanwhile; none that was there is skipped).
  std::vector<std::pair<uint64_t, std::string>> found;
  for (uint32_t i = 0; i < shard_count_; ++i) {
    const Shard& s = shards_[i];
    MutexLock lock(s.mu);
    for (auto it = s.ordered.lower_bound(from); it != s.ordered.end(); ++it) {
      if (cut != 0 && *it >= cut) break;
      found.emplace_back(*it, std::string(s.map.find(*it)->second.key()));
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> keys;
  keys.reserve(found.size());
  for (auto& [hash, key] : found) keys.push_back(std::move(key));
  *next = cut;
  return keys;
}

std::optional<std::string> FlashIndex::random_key(uint64_t seed) const {
  const uint64_t pick = seed >> 32;  // the low bits choose the shard
  for (uint32_t i = 0; i < shard_count_; ++i) {
    const Shard& s = shards_[(seed + i) & (shard_count_ - 1)];
    MutexLock lock(s.mu);
    if (s.sample.empty()) continue;
    return std::string(s.map.find(s.sample[pick % s.sample.size()])->second.key());
  }
  return std::nullopt;
}

bool FlashIndex::drop_chunk(std::string_view key, uint64_t key_hash, uint32_t chunk_index,
                            uint64_t loc) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  auto it = s.map.find(key_hash);
  if (it == s.map.end()) return false;
  Entry& e = it->second;
  if (e.key() != key || chunk_index >= e.slots) return false;
  if (location::place(e.locations()[chunk_index]) != location::place(loc)) return false;
  erase_chunk(s, e, chunk_index);
  if (e.resident == 0) erase_entry(s, it);
  return true;
}

size_t FlashIndex::drop_region(uint32_t region, std::vector<ReinsertCandidate>* hits) {
  size_t touched = 0;
  for (uint32_t i = 0; i < shard_count_; ++i) {
    Shard& s = shards_[i];
    MutexLock lock(s.mu);
    for (auto it = s.map.begin(); it != s.map.end();) {
      Entry& e = it->second;
      for (uint32_t c = 0; c < e.slots; ++c) {
        uint64_t& slot = e.locations()[c];
        if (slot == 0 || location::region(slot) != region) continue;
        ++touched;
        if (hits != nullptr && location::hit(slot) && !location::relocating(slot)) {
          hits->push_back({std::string(e.key()), it->first, c, e.version, e.object_size,
                           location::place(slot), e.expire_at_ms});
          slot = location::place(slot) | location::kRelocatingBit;
        } else {
          erase_chunk(s, e, c);
        }
      }
      if (e.resident == 0) {
        erase_entry(s, it++);
      } else {
        ++it;
      }
    }
  }
  return touched;
}

std::optional<int64_t> FlashIndex::relocating_expiry(std::string_view key, uint64_t key_hash,
                                                     uint32_t chunk_index, uint64_t version) const {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  auto it = s.map.find(key_hash);
  if (it == s.map.end()) return std::nullopt;
  const Entry& e = it->second;
  if (e.key() != key || e.version != version || chunk_index >= e.slots) return std::nullopt;
  if (!location::relocating(e.block[chunk_index])) return std::nullopt;
  return e.expire_at_ms;
}

bool FlashIndex::relocate(std::string_view key, uint64_t key_hash, uint32_t chunk_index,
                          uint64_t version, uint64_t new_location) {
  Shard& s = shard_for(key_hash);
  MutexLock lock(s.mu);
  auto it = s.map.find(key_hash);
  if (it == s.map.end()) return false;
  Entry& e = it->second;
  if (e.key() != key || e.version != version || chunk_index >= e.slots) return false;
  uint64_t& slot = e.locations()[chunk_index];
  if (!location::relocating(slot)) return false;
  slot = location::place(new_location);
  return true;
}

uint64_t FlashIndex::object_count() const {
  uint64_t n = 0;
  for (uint32_t i = 0; i < shard_count_; ++i) {
    MutexLock lock(shards_[i].mu);
    n += shards_[i].map.size();
  }
  return n;
}

uint64_t FlashIndex::chunk_count() const {
  uint64_t n = 0;
  for (uint32_t i = 0; i < shard_count_; ++i) {
    MutexLock lock(shards_[i].mu);
    n += shards_[i].chunks;
  }
  return n;
}

uint64_t FlashIndex::max_version() const {
  uint64_t v = 0;
  for (uint32_t i = 0; i < shard_count_; ++i) {
    MutexLock lock(shards_[i].mu);
    v = std::max(v, shards_[i].max_version);
  }
  return v;
}

size_t FlashIndex::memory_bytes() const {
  // flat_hash_map: one slot plus one control byte per bucket of capacity.
  constexpr size_t kSlot = sizeof(std::pair<const uint64_t, Entry>) + 1;
  size_t n = sizeof(*this) + shard_count_ * sizeof(Shard);
  for (uint32_t i = 0; i < shard_count_; ++i) {
    MutexLock lock(shards_[i].mu);
    n += shards_[i].map.capacity() * kSlot + shards_[i].block_bytes +
         shards_[i].sample.capacity() * sizeof(uint64_t) +
         shards_[i].ordered.size() * sizeof(uint64_t);  // btree nodes: about 8 bytes a key
  }
  return n;
}

void FlashIndex::clear() {
  for (uint32_t i = 0; i < shard_count_; ++i) {
    MutexLock lock(shards_[i].mu);
    shards_[i].map.clear();
    shards_[i].sample.clear();
    shards_[i].ordered.clear();
    shards_[i].block_bytes = 0;
    shards_[i].chunks = 0;
  }
}

}  // namespace tierkv::flash
