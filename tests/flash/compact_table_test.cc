#include "flash/compact_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace tierkv::flash {
namespace {

using Entry = CompactTable::Entry;

bool same(const Entry& a, const Entry& b) {
  return a.location == b.location && a.version == b.version && a.size == b.size &&
         a.has_expiry == b.has_expiry;
}

// The table against a std::map of idents: seeded random puts, erases and
// filters, then every lookup, an ordered walk in pages, and a bucket-image
// copy compared entry by entry.
TEST(CompactTableTest, MatchesAMapOfIdents) {
  for (unsigned bits : {0u, 3u, 9u}) {
    CompactTable table(bits);
    std::map<uint64_t, Entry> model;
    std::mt19937_64 rng(bits + 17);
    std::vector<uint64_t> hashes;
    for (int i = 0; i < 4000; ++i) hashes.push_back(rng());
    for (int step = 0; step < 20000; ++step) {
      const uint64_t h = hashes[rng() % hashes.size()];
      const uint64_t op = rng() % 10;
      if (op < 6) {
        const Entry e{rng() | 1, rng() & CompactTable::kMaxVersion,
                      static_cast<uint32_t>(rng() & CompactTable::kMaxSize), (rng() & 1) != 0};
        EXPECT_EQ(table.put(h, e), !model.contains(table.ident(h)));
        model[table.ident(h)] = e;
      } else if (op < 9) {
        EXPECT_EQ(table.erase(h), model.erase(table.ident(h)) == 1);
      } else if (step % 50 == 0) {
        // Drop about a third, and change the location of the rest.
        table.filter([&](uint64_t ident, Entry& e) {
          if (e.version % 3 == 0) {
            model.erase(ident);
            return false;
          }
          e.location += 2;
          model[ident].location += 2;
          return true;
        });
      }
    }
    ASSERT_EQ(table.size(), model.size());
    for (uint64_t h : hashes) {
      auto it = model.find(table.ident(h));
      std::optional<Entry> got = table.find(h);
      ASSERT_EQ(got.has_value(), it != model.end());
      if (got) {
        EXPECT_TRUE(same(*got, it->second));
      }
    }
    // Walked in pages of 7: every entry once, in ident order.
    std::vector<uint64_t> walked;
    uint64_t from = 0;
    do {
      std::vector<CompactTable::Named> page;
      from = table.walk_from(from, 7, &page);
      ASSERT_LE(page.size(), 7u);
      for (const auto& n : page) {
        ASSERT_TRUE(same(n.entry, model.at(n.ident)));
        walked.push_back(n.ident);
      }
    } while (from != 0);
    std::vector<uint64_t> idents;
    for (const auto& [ident, e] : model) idents.push_back(ident);
    EXPECT_EQ(walked, idents);
    // A picked entry is a real one.
    for (uint64_t seed = 0; seed < 100; ++seed) {
      std::optional<CompactTable::Named> n = table.pick(rng());
      ASSERT_TRUE(n);
      EXPECT_TRUE(same(n->entry, model.at(n->ident)));
    }
    // Bucket images load into a table of the same geometry as they were.
    CompactTable copy(bits);
    uint64_t newest = 0;
    for (size_t b = 0; b < table.bucket_count(); ++b) {
      ASSERT_TRUE(copy.load_bucket(b, table.bucket_bytes(b), &newest));
    }
    EXPECT_EQ(copy.size(), table.size());
    for (const auto& [ident, e] : model) {
      ASSERT_TRUE(copy.find(ident));
      EXPECT_TRUE(same(*copy.find(ident), e));
    }
    uint64_t max_version = 0;
    for (const auto& [ident, e] : model) max_version = std::max(max_version, e.version);
    EXPECT_EQ(newest, max_version);
  }
}

TEST(CompactTableTest, RejectsADamagedBucketImage) {
  CompactTable table(2);
  for (uint64_t i = 1; i <= 50; ++i) table.put(i << 40, Entry{i, i, 10, false});
  std::vector<uint8_t> image;
  for (size_t b = 0; b < table.bucket_count(); ++b) {
    auto bytes = table.bucket_bytes(b);
    if (bytes.size() > 2 * CompactTable::kEntryBytes) {
      image.assign(bytes.begin(), bytes.end());
      break;
    }
  }
  ASSERT_FALSE(image.empty());
  CompactTable copy(2);
  uint64_t newest = 0;
  // Not whole entries; then two entries out of order.
  EXPECT_FALSE(copy.load_bucket(0, std::span(image).first(image.size() - 1), &newest));
  std::swap_ranges(image.begin(), image.begin() + CompactTable::kEntryBytes,
                   image.begin() + CompactTable::kEntryBytes);
  EXPECT_FALSE(copy.load_bucket(0, image, &newest));
  EXPECT_EQ(copy.size(), 0u);
}

// The design target: at most 24 B of DRAM per entry, whatever the count,
// once buckets hold their expected ~64 entries or more.
TEST(CompactTableTest, CostsAtMost24BytesAnEntry) {
  CompactTable table(10);
  std::mt19937_64 rng(5);
  const size_t empty = table.memory_bytes();
  for (int n = 0; n < 400000; ++n) table.put(rng(), Entry{rng(), 1, 100, false});
  const double per_entry =
      static_cast<double>(table.memory_bytes() - empty) / static_cast<double>(table.size());
  std::printf("[compact] %.2f B per entry at %zu entries\n", per_entry, size_t{table.size()});
  EXPECT_LE(per_entry, 24.0);
  // Erasing most of them gives the memory back.
  size_t erased = table.filter([](uint64_t, Entry& e) { return e.location % 8 == 0; });
  EXPECT_GT(erased, 300000u);
  EXPECT_LE(static_cast<double>(table.memory_bytes() - empty) / static_cast<double>(table.size()),
            26.0);
}

}  // namespace
}  // namespace tierkv::flash
