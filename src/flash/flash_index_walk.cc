// FlashIndex: whole-index walks (the key space, reclaim's region sweep, the
// snapshot images) and totals. Single-key calls are in flash_index.cc.
#include <algorithm>
#include <cstring>

#include "core/hash.h"
#include "flash/flash_index.h"

namespace tierkv::flash {

void FlashIndex::for_each_entry(const std::function<void(const EntryImage&)>& fn) const {
  std::vector<uint64_t> places;
  for (const auto& shard : shards_) {
    Shard& s = *shard;
    MutexLock lock(s.mu);
    for (const auto& [hash, e] : s.map) {
      places.assign(e.block.get(), e.block.get() + e.slots);
      for (uint64_t& p : places) p = location::relocating(p) ? 0 : location::place(p);
      fn(EntryImage{e.key(), e.version, e.object_size, e.expire_at_ms, places});
    }
  }
}

void FlashIndex::restore(const EntryImage& image) {
  const uint64_t hash = key_hash(image.key);
  const auto slots = static_cast<uint32_t>(image.locations.size());
  for (uint32_t c = 0; c < slots; ++c) {
    if (image.locations[c] == 0) continue;
    add(image.key, hash, c, image.version, image.object_size, image.locations[c], slots,
        image.expire_at_ms);
  }
}

void FlashIndex::for_each_compact_bucket(
    const std::function<void(uint32_t, uint64_t, std::span<const uint8_t>)>& fn) const {
  for (uint32_t i = 0; i < shard_count_; ++i) {
    Shard& s = *shards_[i];
    MutexLock lock(s.mu);
    for (uint64_t b = 0; b < s.compact.bucket_count(); ++b) fn(i, b, s.compact.bucket_bytes(b));
  }
}

bool FlashIndex::restore_compact_bucket(uint32_t shard, uint64_t bucket,
                                        std::span<const uint8_t> bytes) {
  if (bytes.size() % CompactTable::kEntryBytes != 0) return false;
  const auto count = static_cast<uint32_t>(bytes.size() / CompactTable::kEntryBytes);
  return restore_compact_bucket(shard, bucket, count, [&](uint8_t* dst, size_t n) {
    std::memcpy(dst, bytes.data(), n);
    return true;
  });
}

bool FlashIndex::restore_compact_bucket(uint32_t shard, uint64_t bucket, uint32_t count,
                                        absl::FunctionRef<bool(uint8_t*, size_t)> fill) {
  if (shard >= shard_count_) return false;
  Shard& s = *shards_[shard];
  MutexLock lock(s.mu);
  if (bucket >= s.compact.bucket_count()) return false;
  uint64_t newest = 0;
  if (!s.compact.load_bucket(bucket, count, fill, &newest)) return false;
  s.max_version = std::max(s.max_version, newest);
  return true;
}

void FlashIndex::for_each_compact_expiry(
    const std::function<void(uint64_t ident, int64_t)>& fn) const {
  for (const auto& shard : shards_) {
    Shard& s = *shard;
    MutexLock lock(s.mu);
    for (const auto& [ident, ms] : s.compact_expiry) fn(ident, ms);
  }
}

bool FlashIndex::restore_compact_expiry(uint64_t ident, int64_t expire_at_ms) {
  Shard& s = shard_for(ident);
  MutexLock lock(s.mu);
  std::optional<CompactTable::Entry> c = s.compact.find(ident);
  if (!c || !c->has_expiry || expire_at_ms == 0) return false;
  s.compact_expiry[compact_ident(ident)] = expire_at_ms;
  return true;
}

std::vector<std::string> FlashIndex::read_keys(
    const std::vector<std::pair<uint64_t, uint64_t>>& named) const {
  std::vector<std::string> keys;
  keys.reserve(named.size());
  for (auto [ident, loc] : named) {
    // Reclaim may move or drop the entry between the walk and the read.
    for (int attempt = 0; attempt < 2 && key_reader_; ++attempt) {
      std::optional<std::string> key = key_reader_(location::place(loc));
      if (key && compact_ident(key_hash(*key)) == ident) {
        keys.push_back(std::move(*key));
        break;
      }
      Shard& s = shard_for(ident);
      MutexLock lock(s.mu);
      std::optional<CompactTable::Entry> c = s.compact.find(ident);
      if (!c || location::place(c->location) == location::place(loc)) break;
      loc = c->location;
    }
  }
  return keys;
}

std::vector<std::string> FlashIndex::keys_in_shard(uint32_t shard) const {
  std::vector<std::string> keys;
  if (shard >= shard_count_) return keys;
  std::vector<std::pair<uint64_t, uint64_t>> compact;
  {
    Shard& s = *shards_[shard];
    MutexLock lock(s.mu);
    keys.reserve(s.map.size());
    for (const auto& [hash, e] : s.map) keys.emplace_back(e.key());
    s.compact.filter([&](uint64_t ident, CompactTable::Entry& c) {
      compact.emplace_back(ident | shard, c.location);
      return true;
    });
  }
  for (std::string& k : read_keys(compact)) keys.push_back(std::move(k));
  return keys;
}

// Keyed entries are walked by hash and compact ones by their ident's top
// bits (the hash with its low bits cleared, a prefix); both orders agree
// with the hash's, so one cursor serves both. Once read, a compact key is
// placed by its real hash: one whose prefix the page takes but whose hash is
// outside [from, cut) belongs to the page before or after, so every key
// comes once.
std::vector<std::string> FlashIndex::keys_from(uint64_t from, size_t max, uint64_t* next) const {
  max = std::max<size_t>(max, 1);
  struct Found {
    uint64_t order;
    bool compact;
    uint64_t ident;     // compact: its ident (with shard bits)
    uint64_t location;  // compact: where its key is
  };
  // First the positions only: up to `max` per shard. Every position below
  // `bound` (the lowest one a shard left out) was seen.
  std::vector<Found> found;
  uint64_t bound = 0;  // 0: no shard left any out
  auto lower = [&bound](uint64_t left_out) {
    if (left_out != 0 && (bound == 0 || left_out < bound)) bound = left_out;
  };
  std::vector<CompactTable::Named> named;
  for (uint32_t i = 0; i < shard_count_; ++i) {
    Shard& s = *shards_[i];
    MutexLock lock(s.mu);
    auto it = s.ordered.lower_bound(from);
    for (size_t n = 0; it != s.ordered.end() && n < max; ++it, ++n) {
      found.push_back({*it, false, 0, 0});
    }
    if (it != s.ordered.end()) lower(*it);
    named.clear();
    lower(s.compact.walk_from(from, max, &named));
    for (const auto& n : named) found.push_back({n.ident, true, n.ident | i, n.entry.location});
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.order < b.order; });
  uint64_t cut = bound;
  if (found.size() > max && (cut == 0 || found[max].order < cut)) cut = found[max].order;
  // More than a page of prefixes equal to from's (forced collisions): take
  // them all rather than step back.
  if (cut != 0 && cut <= from) cut = (from | ~CompactTable::ident_mask(bucket_bits_)) + 1;
  // Then the keys of [from, cut), copied for the page only: keyed ones
  // again under their shard's lock (more only if keys came in meanwhile;
  // none that was there is skipped), compact ones read from flash.
  std::vector<std::pair<uint64_t, std::string>> page;
  for (uint32_t i = 0; i < shard_count_; ++i) {
    Shard& s = *shards_[i];
    MutexLock lock(s.mu);
    for (auto it = s.ordered.lower_bound(from); it != s.ordered.end(); ++it) {
      if (cut != 0 && *it >= cut) break;
      page.emplace_back(*it, std::string(s.map.find(*it)->second.key()));
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> compact;
  for (const Found& f : found) {
    if (cut != 0 && f.order >= cut) break;
    if (f.compact) compact.emplace_back(f.ident, f.location);
  }
  for (std::string& k : read_keys(compact)) {
    const uint64_t hash = key_hash(k);
    if (hash >= from && (cut == 0 || hash < cut)) page.emplace_back(hash, std::move(k));
  }
  std::sort(page.begin(), page.end());
  std::vector<std::string> keys;
  keys.reserve(page.size());
  for (auto& [hash, key] : page) keys.push_back(std::move(key));
  *next = cut;
  return keys;
}

std::optional<std::string> FlashIndex::random_key(uint64_t seed) const {
  const uint64_t pick = seed >> 32;  // the low bits choose the shard
  for (uint32_t i = 0; i < shard_count_; ++i) {
    const uint32_t shard = (seed + i) & (shard_count_ - 1);
    Shard& s = *shards_[shard];
    std::pair<uint64_t, uint64_t> compact;
    {
      MutexLock lock(s.mu);
      const uint64_t total = s.sample.size() + s.compact.size();
      if (total == 0) continue;
      const uint64_t at = pick % total;
      if (at < s.sample.size()) return std::string(s.map.find(s.sample[at])->second.key());
      std::optional<CompactTable::Named> n = s.compact.pick(seed * 0x9E3779B97F4A7C15ULL);
      compact = {n->ident | shard, n->entry.location};
    }
    std::vector<std::string> keys = read_keys({compact});
    if (!keys.empty()) return std::move(keys.front());
  }
  return std::nullopt;
}

size_t FlashIndex::drop_region(uint32_t region) {
  size_t dropped = 0;
  for (uint32_t i = 0; i < shard_count_; ++i) {
    Shard& s = *shards_[i];
    MutexLock lock(s.mu);
    for (auto it = s.map.begin(); it != s.map.end();) {
      Entry& e = it->second;
      for (uint32_t c = 0; c < e.slots; ++c) {
        const uint64_t slot = e.locations()[c];
        if (slot == 0 || location::region(slot) != region || location::relocating(slot)) continue;
        ++dropped;
        erase_chunk(s, e, c);
      }
      if (e.resident == 0) {
        erase_entry(s, it++);
      } else {
        ++it;
      }
    }
    s.compact.filter([&](uint64_t ident, CompactTable::Entry& c) {
      s.mu.assert_held();  // the analysis does not follow the lock into lambdas
      if (location::region(c.location) != region || location::relocating(c.location)) return true;
      ++dropped;
      if (c.has_expiry) s.compact_expiry.erase(ident | i);
      return false;
    });
  }
  return dropped;
}

size_t FlashIndex::drop_listed(uint32_t region, std::span<const RegionResident> residents) {
  auto in_place = [region](uint64_t slot, uint64_t listed) {
    return slot != 0 && location::region(slot) == region && !location::relocating(slot) &&
           location::place(slot) == listed;
  };
  size_t dropped = 0;
  for (const RegionResident& r : residents) {
    Shard& s = shard_for(r.key_hash);
    MutexLock lock(s.mu);
    if (r.compact) {
      std::optional<CompactTable::Entry> c = s.compact.find(r.key_hash);
      if (!c || !in_place(c->location, r.location)) continue;
      erase_compact(s, r.key_hash);
      ++dropped;
      continue;
    }
    auto it = s.map.find(r.key_hash);
    if (it == s.map.end() || r.chunk_index >= it->second.slots) continue;
    Entry& e = it->second;
    if (!in_place(e.locations()[r.chunk_index], r.location)) continue;
    erase_chunk(s, e, r.chunk_index);
    ++dropped;
    if (e.resident == 0) erase_entry(s, it);
  }
  return dropped;
}

size_t FlashIndex::count_in_region(uint32_t region) const {
  auto counts = [region](uint64_t slot) {
    return slot != 0 && location::region(slot) == region && !location::relocating(slot);
  };
  size_t n = 0;
  for (uint32_t i = 0; i < shard_count_; ++i) {
    Shard& s = *shards_[i];
    MutexLock lock(s.mu);
    for (auto& [key_hash, e] : s.map) {
      for (uint32_t c = 0; c < e.slots; ++c) n += counts(e.locations()[c]) ? 1 : 0;
    }
    s.compact.filter([&](uint64_t, CompactTable::Entry& c) {
      n += counts(c.location) ? 1 : 0;
      return true;
    });
  }
  return n;
}

size_t FlashIndex::mark_for_reinsertion(uint32_t region, std::vector<ReinsertCandidate>& hits,
                                        RegionYield& yield,
                                        std::vector<RegionResident>* residents) {
  const size_t before = hits.size();
  walk_region(region, &hits, &yield, residents);
  return hits.size() - before;
}

void FlashIndex::list_region(uint32_t region, std::vector<RegionResident>& residents) {
  walk_region(region, nullptr, nullptr, &residents);
}

void FlashIndex::walk_region(uint32_t region, std::vector<ReinsertCandidate>* hits,
                             RegionYield* yield, std::vector<RegionResident>* residents) {
  for (uint32_t i = 0; i < shard_count_; ++i) {
    Shard& s = *shards_[i];
    MutexLock lock(s.mu);
    for (auto& [key_hash, e] : s.map) {
      for (uint32_t c = 0; c < e.slots; ++c) {
        const uint64_t slot = e.locations()[c];
        if (slot == 0 || location::region(slot) != region || location::relocating(slot)) continue;
        mark_slot(key_hash, e, c, hits, yield, residents);
      }
    }
    lock.unlock();
    // The compact table a slice of buckets at a time: a whole shard of tens
    // of millions of objects held its lock for tens of milliseconds, which
    // every lookup in the shard waited for. Entries never change buckets,
    // and none can come to point into a region once it is written.
    for (uint64_t first = 0;; first += kWalkSliceBuckets) {
      MutexLock slice(s.mu);
      if (first >= s.compact.bucket_count()) break;
      s.compact.filter_buckets(first, first + kWalkSliceBuckets,
                               [&](uint64_t ident, CompactTable::Entry& c) {
                                 s.mu.assert_held();
                                 mark_compact(s, ident | i, c, region, hits, yield, residents);
                                 return true;
                               });
    }
  }
}

size_t FlashIndex::mark_records(uint32_t region, std::span<const ParsedRecord> records,
                                std::vector<ReinsertCandidate>* hits, RegionYield* yield,
                                std::vector<RegionResident>& residents) {
  const size_t before = hits ? hits->size() : 0;
  for (const ParsedRecord& rec : records) {
    if (rec.header.flags & (kRecordTombstone | kRecordExpiry)) continue;
    const uint64_t hash = key_hash(rec.key);
    const uint64_t place = location::place(rec.location);
    const uint32_t chunk = rec.header.chunk_index;
    Shard& s = shard_for(hash);
    MutexLock lock(s.mu);
    if (Entry* e = keyed(s, rec.key, hash)) {
      if (chunk >= e->slots) continue;
      const uint64_t slot = e->locations()[chunk];
      if (location::place(slot) == place && !location::relocating(slot))
        mark_slot(hash, *e, chunk, hits, yield, &residents);
      continue;
    }
    std::optional<CompactTable::Entry> c = s.compact.find(hash);
    if (chunk != 0 || !c || location::place(c->location) != place) continue;
    const uint64_t marked = c->location;
    mark_compact(s, compact_ident(hash), *c, region, hits, yield, &residents);
    if (c->location != marked) s.compact.put(hash, *c);
  }
  return hits ? hits->size() - before : 0;
}

void FlashIndex::mark_slot(uint64_t key_hash, Entry& e, uint32_t c,
                           std::vector<ReinsertCandidate>* hits, RegionYield* yield,
                           std::vector<RegionResident>* residents) {
  uint64_t& slot = e.locations()[c];
  if (yield) yield->count(slot);
  if (residents) residents->push_back({key_hash, location::place(slot), c, false});
  if (!hits || !location::hit(slot)) return;
  hits->push_back({std::string(e.key()), key_hash, c, e.version, e.object_size,
                   location::place(slot), e.expire_at_ms});
  slot = location::place(slot) | location::kRelocatingBit;
}

void FlashIndex::mark_compact(Shard& s, uint64_t id, CompactTable::Entry& c, uint32_t region,
                              std::vector<ReinsertCandidate>* hits, RegionYield* yield,
                              std::vector<RegionResident>* residents) const {
  if (location::region(c.location) != region || location::relocating(c.location)) return;
  if (yield) yield->count(c.location);
  if (residents) residents->push_back({id, location::place(c.location), 0, true});
  if (!hits || !location::hit(c.location)) return;
  hits->push_back({std::string(), id, 0, c.version, c.size, location::place(c.location),
                   compact_expiry(s, id, c)});
  c.location = location::place(c.location) | location::kRelocatingBit;
}

uint64_t FlashIndex::object_count() const {
  uint64_t n = 0;
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    n += shard->map.size() + shard->compact.size();
  }
  return n;
}

uint64_t FlashIndex::compact_count() const {
  uint64_t n = 0;
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    n += shard->compact.size();
  }
  return n;
}

uint64_t FlashIndex::chunk_count() const {
  uint64_t n = 0;
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    n += shard->chunks + shard->compact.size();
  }
  return n;
}

uint64_t FlashIndex::max_version() const {
  uint64_t v = 0;
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    v = std::max(v, shard->max_version);
  }
  return v;
}

size_t FlashIndex::memory_bytes() const {
  // flat_hash_map: one slot plus one control byte per bucket of capacity.
  constexpr size_t kSlot = sizeof(std::pair<const uint64_t, Entry>) + 1;
  constexpr size_t kExpirySlot = sizeof(std::pair<const uint64_t, int64_t>) + 1;
  size_t n = sizeof(*this) + shard_count_ * sizeof(Shard);
  for (const auto& shard : shards_) {
    const Shard& s = *shard;
    MutexLock lock(s.mu);
    n += s.map.capacity() * kSlot + s.block_bytes + s.sample.capacity() * sizeof(uint64_t) +
         s.ordered.size() * sizeof(uint64_t) +  // btree nodes: about 8 bytes a key
         s.compact.memory_bytes() + s.compact_expiry.capacity() * kExpirySlot;
  }
  return n;
}

void FlashIndex::clear() {
  for (const auto& shard : shards_) {
    Shard& s = *shard;
    MutexLock lock(s.mu);
    s.map.clear();
    s.sample.clear();
    s.ordered.clear();
    s.block_bytes = 0;
    s.chunks = 0;
    s.compact.clear();
    s.compact_expiry.clear();
  }
}

}  // namespace tierkv::flash
