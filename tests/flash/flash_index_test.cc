#include "flash/flash_index.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/hash.h"

namespace tierkv::flash {
namespace {

// A record starting block `block` of `region`.
uint64_t loc(uint32_t region, uint64_t block, uint64_t size = 1) {
  return location::pack(region, block * location::kBlock, size);
}

// The keys "on flash": what the index's KeyReader finds at each location
// (compact entries keep their keys there only).
struct KeyBook {
  std::map<uint64_t, std::string> at;
  void attach(FlashIndex& index) {
    index.set_key_reader([this](uint64_t l) -> std::optional<std::string> {
      auto it = at.find(l);
      if (it == at.end()) return std::nullopt;
      return it->second;
    });
  }
};

TEST(FlashIndexTest, LocationPacksAndUnpacks) {
  // A 4 KiB object with a 24-byte key: 4184 bytes, nine 512-byte units.
  const uint64_t l = location::pack(123456, 1000 * 4096, 64 + 24 + 4096);
  EXPECT_FALSE(location::packed(l));
  EXPECT_EQ(location::region(l), 123456u);
  EXPECT_EQ(location::offset_bytes(l), 1000u * 4096);
  EXPECT_EQ(location::length_bytes(l), 9u * 512);
  EXPECT_EQ(location::place(l | location::kHitBit | location::kRelocatingBit), l);
  // Its read covers the record, aligned, and no more.
  const location::ReadSpan s = location::read_span(l, 4096);
  EXPECT_EQ(s.start, 1000u * 4096);
  EXPECT_EQ(s.length, 8192u);
  EXPECT_EQ(s.skew, 0u);
}

TEST(FlashIndexTest, SmallRecordsPackInsideABlock) {
  // 64-byte header, 16-byte key, 200-byte value: 280 bytes, 18 units of 16.
  const uint64_t l = location::pack(7, 5 * 4096 + 3 * 288, 280);
  EXPECT_TRUE(location::packed(l));
  EXPECT_EQ(location::region(l), 7u);
  EXPECT_EQ(location::offset_bytes(l), 5u * 4096 + 3 * 288);
  EXPECT_EQ(location::length_bytes(l), 288u);
  // 512-byte sectors: only the sectors the record touches, inside its block.
  location::ReadSpan s = location::read_span(l, 512);
  EXPECT_EQ(s.start, 5u * 4096 + 512);
  EXPECT_EQ(s.skew, 3u * 288 - 512);
  EXPECT_EQ(s.length, 1024u);
  s = location::read_span(l, 4096);
  EXPECT_EQ(s.start, 5u * 4096);
  EXPECT_EQ(s.length, 4096u);
  s = location::read_span(l, 1);  // buffered I/O
  EXPECT_EQ(s.start, 5u * 4096 + 3 * 288);
  EXPECT_EQ(s.length, 288u);
  // The last record of a block, and a whole block's record.
  const uint64_t last = location::pack(1, 4096 - 16, 16);
  EXPECT_EQ(location::offset_bytes(last), 4096u - 16);
  EXPECT_EQ(location::read_span(last, 4096).length, 4096u);
  const uint64_t whole = location::pack(1, 8192, 4096);
  EXPECT_TRUE(location::packed(whole));
  EXPECT_EQ(location::length_bytes(whole), 4096u);
  EXPECT_EQ(location::offset_bytes(whole), 8192u);
}

TEST(FlashIndexTest, LocationHoldsTheLargestRecord) {
  const uint64_t l =
      location::pack(location::kMaxRegion, location::kMaxBlocks * 4096, location::kMaxRecordBytes);
  EXPECT_FALSE(location::packed(l));
  EXPECT_EQ(location::region(l), location::kMaxRegion);
  EXPECT_EQ(location::offset_bytes(l), location::kMaxBlocks * 4096);
  EXPECT_EQ(location::length_bytes(l), location::kMaxRecordBytes);
  EXPECT_FALSE(location::hit(l));
  EXPECT_FALSE(location::relocating(l));
  // Exact multiples of 512 do not round up.
  EXPECT_EQ(location::length_bytes(location::pack(1, 4096, 4608)), 4608u);
  EXPECT_EQ(location::length_bytes(location::pack(1, 4096, 4097)), 4608u);
}

TEST(FlashIndexTest, LocationsOfSnapshotsBeforePackingReadTheSame) {
  // The layout before packing: bits 0-19 block, 20-39 length in 512-byte
  // units, 40-61 region. Every record then was under 256 MiB.
  const uint64_t old = 1000 | (uint64_t{9} << 20) | (uint64_t{123} << 40);
  EXPECT_FALSE(location::packed(old));
  EXPECT_EQ(location::offset_bytes(old), 1000u * 4096);
  EXPECT_EQ(location::length_bytes(old), 9u * 512);
  EXPECT_EQ(location::region(old), 123u);
}

TEST(FlashIndexTest, AddLookupReplaceDrop) {
  FlashIndex index;
  const std::string key = "obj";
  const uint64_t h = hash64(key);
  EXPECT_FALSE(index.lookup(key, h, 0, std::nullopt, false));
  EXPECT_TRUE(index.add(key, h, 0, 5, 300, loc(1, 1)));
  EXPECT_TRUE(index.add(key, h, 2, 5, 300, loc(1, 3)));
  auto c = index.lookup(key, h, 2, std::nullopt, false);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->location, loc(1, 3));
  EXPECT_EQ(c->version, 5u);
  EXPECT_EQ(c->object_size, 300u);
  EXPECT_FALSE(index.lookup(key, h, 1, std::nullopt, false));
  EXPECT_FALSE(index.lookup(key, h, 0, 4, false));  // wrong version
  EXPECT_EQ(index.chunk_count(), 2u);
  auto info = index.object(key, h);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->chunks, (std::vector<uint32_t>{0, 2}));

  // Same version: the chunk moves. Older version: refused.
  EXPECT_TRUE(index.add(key, h, 0, 5, 300, loc(2, 9)));
  EXPECT_EQ(index.lookup(key, h, 0, 5, false)->location, loc(2, 9));
  EXPECT_FALSE(index.add(key, h, 1, 4, 300, loc(2, 10)));
  // Newer version: the old version's chunks are gone.
  EXPECT_TRUE(index.add(key, h, 1, 6, 300, loc(3, 1)));
  EXPECT_FALSE(index.lookup(key, h, 0, std::nullopt, false));
  EXPECT_TRUE(index.lookup(key, h, 1, 6, false));
  EXPECT_EQ(index.chunk_count(), 1u);
  EXPECT_EQ(index.max_version(), 6u);

  EXPECT_FALSE(index.drop_chunk(key, h, 1, loc(9, 9)));  // not there any more
  EXPECT_TRUE(index.drop_chunk(key, h, 1, loc(3, 1)));
  EXPECT_EQ(index.object_count(), 0u);
  EXPECT_TRUE(index.add(key, h, 0, 7, 0, loc(1, 1)));
  EXPECT_TRUE(index.remove(key, h));
  EXPECT_FALSE(index.remove(key, h));
  EXPECT_EQ(index.chunk_count(), 0u);
}

TEST(FlashIndexTest, HashCollisionNeverServesTheOtherKey) {
  FlashIndex index;
  EXPECT_TRUE(index.add("a", 77, 0, 1, 0, loc(1, 1)));
  EXPECT_FALSE(index.lookup("b", 77, 0, std::nullopt, false));
  EXPECT_TRUE(index.add("b", 77, 0, 1, 0, loc(1, 2)));  // replaces "a"
  EXPECT_FALSE(index.lookup("a", 77, 0, std::nullopt, false));
  EXPECT_EQ(index.lookup("b", 77, 0, std::nullopt, false)->location, loc(1, 2));
}

// Reinsertion marks a region's read chunks before the region is reclaimed:
// they are unreadable while relocating, the reclaim leaves them to the
// round, and the round relocates, keeps in place or drops each.
TEST(FlashIndexTest, MarkedChunksOutliveTheirRegionUntilSettled) {
  FlashIndex index;
  for (int i = 0; i < 10; ++i) {
    const std::string key = "k" + std::to_string(i);
    index.add(key, hash64(key), 0, 1, 0, loc(i % 2, 1 + i));
    index.add(key, hash64(key), 1, 1, 0, loc(2, 1 + i));
  }
  // Read chunk 0 of k0, k2 and k4 (region 0).
  for (const char* key : {"k0", "k2", "k4"}) index.lookup(key, hash64(key), 0, std::nullopt, true);
  std::vector<ReinsertCandidate> hits;
  RegionYield yield;
  EXPECT_EQ(index.mark_for_reinsertion(0, hits, yield), 3u);
  ASSERT_EQ(hits.size(), 3u);
  EXPECT_EQ(index.chunk_count(), 20u);  // nothing dropped
  EXPECT_TRUE(index.lookup("k6", hash64("k6"), 0, std::nullopt, false));
  // Relocating chunks are not readable until settled, nor marked twice.
  EXPECT_FALSE(index.lookup("k0", hash64("k0"), 0, std::nullopt, false));
  EXPECT_EQ(index.mark_for_reinsertion(0, hits, yield), 0u);
  EXPECT_EQ(index.drop_region(0), 2u);  // k6 and k8; the marked three stay
  EXPECT_EQ(index.chunk_count(), 18u);
  for (const auto& c : hits) {
    EXPECT_EQ(location::region(c.location), 0u);
    if (c.key == "k0") {
      EXPECT_TRUE(index.relocate(c.key, c.key_hash, c.chunk_index, c.version, loc(5, 1)));
    } else if (c.key == "k2") {
      EXPECT_TRUE(index.keep_in_place(c.key, c.key_hash, c.chunk_index, c.location));
    } else {
      EXPECT_TRUE(index.drop_chunk(c.key, c.key_hash, c.chunk_index, c.location));
    }
  }
  EXPECT_EQ(index.lookup("k0", hash64("k0"), 0, std::nullopt, false)->location, loc(5, 1));
  EXPECT_EQ(index.lookup("k2", hash64("k2"), 0, std::nullopt, false)->location, loc(0, 3));
  EXPECT_FALSE(index.lookup("k4", hash64("k4"), 0, std::nullopt, false));
  EXPECT_TRUE(index.lookup("k4", hash64("k4"), 1, std::nullopt, false));
  // A relocation of a removed object does nothing.
  index.lookup("k6", hash64("k6"), 1, std::nullopt, true);
  hits.clear();
  index.mark_for_reinsertion(2, hits, yield);
  index.remove("k6", hash64("k6"));
  EXPECT_FALSE(index.relocate("k6", hash64("k6"), 1, 1, loc(6, 1)));
  EXPECT_FALSE(index.keep_in_place("k6", hash64("k6"), 1, loc(2, 7)));
}

// Reinsertion judges copies by what reclaimed regions report: a relocated
// chunk counts as a copy until its key is written again, and a chunk read
// since it was placed counts as read.
TEST(FlashIndexTest, DropRegionCountsWhatFreshChunksAndCopiesDid) {
  FlashIndex index;
  for (int i = 0; i < 6; ++i) {
    const std::string key = "k" + std::to_string(i);
    index.add(key, hash64(key), 0, 1, 0, loc(1, 1 + i));
  }
  for (const char* key : {"k0", "k1", "k2"}) index.lookup(key, hash64(key), 0, std::nullopt, true);
  std::vector<ReinsertCandidate> hits;
  RegionYield first;
  index.mark_for_reinsertion(1, hits, first);
  EXPECT_EQ(first.fresh, 6u);
  EXPECT_EQ(first.fresh_read, 3u);
  EXPECT_EQ(first.copies, 0u);
  ASSERT_EQ(hits.size(), 3u);
  uint64_t block = 10;
  for (const auto& c : hits) {
    EXPECT_TRUE(index.relocate(c.key, c.key_hash, c.chunk_index, c.version, loc(2, block++)));
  }
  // Copies lose the read mark their original had, and a new write of k2
  // is fresh again.
  index.lookup("k1", hash64("k1"), 0, std::nullopt, true);
  EXPECT_TRUE(index.add("k2", hash64("k2"), 0, 2, 0, loc(2, 90)));
  index.add("k9", hash64("k9"), 0, 1, 0, loc(2, 91));
  hits.clear();
  RegionYield second;
  index.mark_for_reinsertion(2, hits, second);
  EXPECT_EQ(second.copies, 2u);
  EXPECT_EQ(second.copies_read, 1u);
  EXPECT_EQ(second.fresh, 2u);
  EXPECT_EQ(second.fresh_read, 0u);
}

// Every way an entry leaves (remove, remove_up_to, drop_chunk, drop_region)
// keeps the sampling array in step: iteration and random_key see exactly
// the live keys.
TEST(FlashIndexTest, KeySpaceFollowsEveryErasure) {
  FlashIndex index(4);
  KeyBook book;
  book.attach(index);
  std::set<std::string> live;
  for (int i = 0; i < 200; ++i) {
    const std::string key = "k" + std::to_string(i);
    // Half keyed (chunk count unknown), half compact.
    ASSERT_TRUE(index.add(key, hash64(key), 0, 1 + i, 10, loc(i % 5, 1 + i), i % 2, 1000 + i));
    book.at[loc(i % 5, 1 + i)] = key;
    live.insert(key);
  }
  EXPECT_EQ(index.compact_count(), 100u);
  index.drop_region(3);  // every fifth key
  for (int i = 3; i < 200; i += 5) live.erase("k" + std::to_string(i));
  for (int i = 0; i < 200; i += 7) {
    const std::string key = "k" + std::to_string(i);
    const uint64_t h = hash64(key);
    bool gone = false;
    if (i % 3 == 0) gone = index.remove(key, h);
    if (i % 3 == 1) gone = index.drop_chunk(key, h, 0, loc(i % 5, 1 + i));
    if (i % 3 == 2) {
      EXPECT_FALSE(index.remove_up_to(key, h, i));  // its version is i + 1
      gone = index.remove_up_to(key, h, i + 1);
    }
    EXPECT_EQ(gone, live.erase(key) == 1) << key;
  }
  std::multiset<std::string> seen;
  for (uint32_t s = 0; s < index.shard_count(); ++s) {
    for (const std::string& k : index.keys_in_shard(s)) seen.insert(k);
  }
  EXPECT_EQ(seen, std::multiset<std::string>(live.begin(), live.end()));
  EXPECT_EQ(index.object_count(), live.size());
  std::set<std::string> sampled;
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    std::optional<std::string> k = index.random_key(hash64(std::to_string(seed)));
    ASSERT_TRUE(k);
    ASSERT_EQ(live.count(*k), 1u) << *k;
    sampled.insert(*k);
  }
  EXPECT_GT(sampled.size(), live.size() * 3 / 4);
  EXPECT_EQ(index.object("k1", hash64("k1"))->expire_at_ms, 1001);
  EXPECT_TRUE(index.set_expiry("k1", hash64("k1"), 2, 5));
  EXPECT_FALSE(index.set_expiry("k1", hash64("k1"), 3, 5));
  EXPECT_EQ(index.lookup("k1", hash64("k1"), 0, std::nullopt, false)->expire_at_ms, 5);
  index.clear();
  EXPECT_FALSE(index.random_key(1));
}

// The design target: <= 16 B per flash-resident chunk plus the key once per
// object. Measured with 1 MiB chunks of 64 MiB objects and of small objects.
TEST(FlashIndexTest, MeasuresBytesPerChunkAndPerObject) {
  struct Case {
    const char* name;
    int objects;
    uint32_t chunks;
    uint32_t hint;
  };
  for (Case c : {Case{"64-chunk objects, count known", 2000, 64, 64},
                 Case{"64-chunk objects, count unknown", 2000, 64, 0},
                 Case{"single-chunk objects", 50000, 1, 1}}) {
    FlashIndex index(16, c.objects);
    const size_t empty = index.memory_bytes();
    size_t key_bytes = 0;
    for (int i = 0; i < c.objects; ++i) {
      const std::string key = "prefix-hash/" + std::to_string(i * 7919);
      key_bytes += key.size();
      for (uint32_t k = 0; k < c.chunks; ++k) {
        index.add(key, hash64(key), k, 1, c.chunks == 1 ? 200 : uint64_t{c.chunks} << 20,
                  loc(1, 1 + k), c.hint);
      }
    }
    const double total = static_cast<double>(index.memory_bytes() - empty);
    const double chunks = static_cast<double>(c.objects) * c.chunks;
    // Per-object cost: everything beyond 8 B per chunk and the key bytes.
    const double per_object = (total - 8 * chunks - static_cast<double>(key_bytes)) / c.objects;
    const double per_chunk_excl_keys = (total - static_cast<double>(key_bytes)) / chunks;
    if (c.chunks == 1) {
      std::printf("[index] %-34s %.2f B/object (keys on flash)\n", c.name, total / c.objects);
    } else {
      std::printf("[index] %-34s %.2f B/chunk (keys excluded), %.1f B/object overhead + key\n",
                  c.name, per_chunk_excl_keys, per_object);
    }
    if (c.chunks > 1) {
      EXPECT_LE(per_chunk_excl_keys, 16.0) << c.name;
    }
    // Growth slack is charged to the object when the chunk count is unknown.
    if (c.hint != 0 && c.chunks > 1) {
      EXPECT_LE(per_object, 160.0) << c.name;
    }
    // Single chunks are compact: no key in DRAM, 21 B and slack.
    if (c.chunks == 1) {
      EXPECT_EQ(index.compact_count(), static_cast<uint64_t>(c.objects));
      EXPECT_LE(total / c.objects, 24.0) << c.name;
    }
  }
}

}  // namespace
}  // namespace tierkv::flash
