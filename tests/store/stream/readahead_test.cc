// Readahead of sequential ranged reads of one object (readahead.h): the
// second sequential read starts it, the window doubles up to its cap, reads
// are served from it byte for byte, it never reads past the end, and an
// out-of-order read, another key, or a changed version ends it (the chunks
// read ahead counted wasted, never served stale or mixed).
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "store/store_tiers.h"
#include "store/stream/readahead.h"
#include "tests/store/stream/stream_test_util.h"

namespace tierkv {
namespace {

using testing::eventually;
using testing::kChunk;
using testing::stream_config;
using testing::TempDir;
using testing::value_for;

class ReadaheadTest : public ::testing::Test {
 protected:
  std::unique_ptr<Store> open(Config c) {
    c.promotion_on_hit = false;  // objects stay on flash however often read
    auto s = Store::open(c);
    EXPECT_TRUE(s) << s.status().to_string();
    return s ? std::move(*s) : nullptr;
  }
  static void place(Store& store, const std::string& key, uint64_t seed, size_t size) {
    testing::place_on_flash(store, key, seed, size);
  }
  static testing::RangeRead read(Readahead& ra, const std::string& key, uint64_t off,
                                 uint64_t len) {
    return testing::readahead_read(ra, key, off, len);
  }
  static uint64_t served(const ReadaheadCounts& n) { return n.hits + n.late; }
  TempDir dir_;
};

TEST_F(ReadaheadTest, SecondSequentialReadStartsItAndTheWindowDoublesToTheCap) {
  auto store = open(stream_config(dir_));
  const size_t chunks = 40;
  const std::string ref = value_for(1, chunks * kChunk);
  place(*store, "big", 1, ref.size());
  auto ra = store->open_readahead();
  // Read chunk by chunk: the initial window for a one-chunk request with a
  // cap of 16 is 2 (Linux: the request times 2), then 4, 8, 16, 16, ...
  const std::vector<uint32_t> windows = {0, 2, 4, 8, 16, 16};
  for (size_t i = 0; i < chunks; ++i) {
    testing::RangeRead r = read(*ra, "big", i * kChunk, kChunk);
    ASSERT_TRUE(r.status.is_ok()) << i << ": " << r.status.to_string();
    ASSERT_EQ(r.where, ReadStart::Where::kFlash) << i;
    ASSERT_TRUE(r.bytes == ref.substr(i * kChunk, kChunk)) << i;
    EXPECT_EQ(ra->active(), i >= 1) << i;
    if (i < windows.size()) {
      EXPECT_EQ(ra->window(), windows[i]) << i;
    }
    EXPECT_LE(ra->staged(), std::max<uint32_t>(ra->window(), 1)) << i;
    EXPECT_LE(ra->staged(), chunks - 1 - i) << i;  // never past the end
  }
  ReadaheadCounts n = ra->counts();
  EXPECT_EQ(n.sequences, 1u);
  EXPECT_EQ(served(n), chunks - 2);  // every read after the second
  EXPECT_EQ(n.issued, chunks - 2);   // each chunk past the second read once, none past the end
  EXPECT_EQ(n.wasted, 0u);
  EXPECT_TRUE(eventually([&] { return StoreTiers::memory(*store).use_once_bytes() == 0; }));
  EXPECT_FALSE(StoreTiers::memory(*store).contains("big"));
}

TEST_F(ReadaheadTest, WindowStopsAtReadaheadMaxChunks) {
  Config c = stream_config(dir_);
  c.readahead_max_chunks = 5;
  auto store = open(c);
  place(*store, "big", 2, 30 * kChunk);
  auto ra = store->open_readahead();
  std::vector<uint32_t> seen;
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_EQ(read(*ra, "big", i * kChunk, kChunk).bytes,
              value_for(2, 30 * kChunk).substr(i * kChunk, kChunk));
    seen.push_back(ra->window());
  }
  // 1 <= 5/4: times 2, then doubling, capped at 5.
  EXPECT_EQ(seen, (std::vector<uint32_t>{0, 2, 4, 5, 5, 5, 5, 5}));
}

TEST_F(ReadaheadTest, RandomSequentialLengthsMatchTheReferenceAndAreAllServed) {
  auto store = open(stream_config(dir_));
  const size_t size = 23 * kChunk + 1234;
  const std::string ref = value_for(3, size);
  place(*store, "obj", 3, size);
  for (uint64_t seed : {1u, 2u, 3u}) {
    std::mt19937_64 rng(seed);
    auto ra = store->open_readahead();
    uint64_t off = 0;
    uint64_t reads = 0;
    while (off < size && reads < 10'000) {
      // Lengths around the chunk size, unaligned, up to three chunks.
      const uint64_t len = 1 + rng() % (3 * kChunk);
      testing::RangeRead r = read(*ra, "obj", off, len);
      ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
      ASSERT_TRUE(r.bytes == ref.substr(off, len))
          << "seed " << seed << " at " << off << " +" << len;
      off += r.bytes.size();
      ++reads;
    }
    ReadaheadCounts n = ra->counts();
    EXPECT_EQ(n.sequences, 1u) << seed;
    EXPECT_EQ(served(n), reads - 2) << seed;
    EXPECT_EQ(n.wasted, 0u) << seed;
    EXPECT_LE(n.issued, size / kChunk + 1) << seed;  // no chunk read twice
    EXPECT_EQ(ra->staged(), 0u) << seed;
  }
  EXPECT_TRUE(eventually([&] { return StoreTiers::memory(*store).use_once_bytes() == 0; }));
}

TEST_F(ReadaheadTest, SeededMixOfRunsAndJumpsMatchesTheReference) {
  auto store = open(stream_config(dir_));
  const size_t size = 40 * kChunk + 999;
  const std::string ref = value_for(12, size);
  place(*store, "obj", 12, size);
  auto ra = store->open_readahead();
  std::mt19937_64 rng(99);
  uint64_t off = 0;
  for (int i = 0; i < 3000; ++i) {
    if (rng() % 20 == 0) off = rng() % size;  // a jump
    const uint64_t len = 1 + rng() % (3 * kChunk);
    testing::RangeRead r = read(*ra, "obj", off, len);
    ASSERT_TRUE(r.status.is_ok()) << i << ": " << r.status.to_string();
    ASSERT_EQ(r.bytes.size(), std::min<uint64_t>(len, size - off))
        << i << " at " << off << " +" << len;
    ASSERT_TRUE(r.bytes == ref.substr(off, len)) << i << " at " << off << " +" << len;
    off = off + r.bytes.size() < size ? off + r.bytes.size() : 0;
    // A consumer that sometimes lets the look-ahead arrive first (hits).
    if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
  }
  ReadaheadCounts n = ra->counts();
  EXPECT_GT(n.sequences, 10u);
  EXPECT_GT(served(n), 1000u);
  EXPECT_GT(n.wasted, 0u);
  ra.reset();
  EXPECT_TRUE(eventually([&] { return StoreTiers::memory(*store).use_once_bytes() == 0; }));
}

TEST_F(ReadaheadTest, OutOfOrderReadOrAnotherKeyEndsItAndCountsWasted) {
  auto store = open(stream_config(dir_));
  const size_t size = 20 * kChunk;
  place(*store, "a", 4, size);
  place(*store, "b", 5, size);
  auto ra = store->open_readahead();
  for (size_t i = 0; i < 4; ++i) read(*ra, "a", i * kChunk, kChunk);
  ASSERT_TRUE(ra->active());
  ASSERT_TRUE(eventually([&] { return ra->staged() == ra->window(); }));
  const uint32_t staged = ra->staged();
  ASSERT_GT(staged, 0u);
  // A jump back: the look-ahead ends, what it read ahead is wasted.
  testing::RangeRead r = read(*ra, "a", 100, 1000);
  EXPECT_EQ(r.bytes, value_for(4, size).substr(100, 1000));
  EXPECT_FALSE(ra->active());
  EXPECT_EQ(ra->staged(), 0u);
  EXPECT_EQ(ra->counts().wasted, staged);
  // It starts again from there, and another key ends it too.
  read(*ra, "a", 1100, kChunk);
  ASSERT_TRUE(ra->active());
  ASSERT_TRUE(eventually([&] { return ra->staged() == ra->window(); }));
  const uint32_t staged2 = ra->staged();
  EXPECT_EQ(read(*ra, "b", 1100 + kChunk, 10).bytes, value_for(5, size).substr(1100 + kChunk, 10));
  EXPECT_FALSE(ra->active());
  EXPECT_EQ(ra->counts().wasted, staged + staged2);
  EXPECT_EQ(ra->counts().sequences, 2u);
  EXPECT_TRUE(eventually([&] { return StoreTiers::memory(*store).use_once_bytes() == 0; }));
}

TEST_F(ReadaheadTest, MemoryObjectsAndReadaheadOffReadPlainly) {
  Config c = stream_config(dir_);
  auto store = open(c);
  ASSERT_TRUE(store->put("mem", value_for(6, 4 * kChunk)));
  place(*store, "big", 7, 10 * kChunk);
  auto ra = store->open_readahead();
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(read(*ra, "mem", i * kChunk, kChunk).where, ReadStart::Where::kMemory);
  EXPECT_FALSE(ra->active());
  c.readahead = false;
  ASSERT_TRUE(store->apply_config(ConfigApply::kStream, c).is_ok());
  for (size_t i = 0; i < 6; ++i)
    EXPECT_EQ(read(*ra, "big", i * kChunk, kChunk).bytes,
              value_for(7, 10 * kChunk).substr(i * kChunk, kChunk));
  EXPECT_FALSE(ra->active());
  EXPECT_EQ(ra->counts().sequences, 0u);
  EXPECT_EQ(ra->counts().issued, 0u);
}

TEST_F(ReadaheadTest, OverwriteMidSequenceIsNeverServedStale) {
  auto store = open(stream_config(dir_));
  const size_t size = 16 * kChunk;
  place(*store, "k", 8, size);
  auto ra = store->open_readahead();
  for (size_t i = 0; i < 3; ++i) read(*ra, "k", i * kChunk, kChunk);
  ASSERT_TRUE(eventually([&] { return ra->staged() == ra->window(); }));
  const uint32_t staged = ra->staged();
  // Rewritten, and on flash again: the look-ahead holds the old version.
  place(*store, "k", 9, size);
  testing::RangeRead r = read(*ra, "k", 3 * kChunk, kChunk);
  EXPECT_EQ(r.bytes, value_for(9, size).substr(3 * kChunk, kChunk));
  EXPECT_EQ(ra->counts().wasted, staged);
  // The sequence goes on with the new version, read ahead again.
  for (size_t i = 4; i < 16; ++i)
    ASSERT_EQ(read(*ra, "k", i * kChunk, kChunk).bytes,
              value_for(9, size).substr(i * kChunk, kChunk));
  EXPECT_EQ(ra->counts().sequences, 2u);
  EXPECT_GT(served(ra->counts()), 8u);
}

}  // namespace
}  // namespace tierkv
