// Ranged and use-once reads (Store::read with ReadOptions) and the
// StreamReader: order, look-ahead bounds, reset and out-of-order reads,
// keys changed mid-stream, and use-once scans beside a hot set.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "store/store_tiers.h"
#include "tests/store/stream/stream_test_util.h"

namespace tierkv {
namespace {

using testing::eventually;
using testing::kChunk;
using testing::read_range;
using testing::stream_config;
using testing::stream_key;
using testing::TempDir;
using testing::to_flash_only;
using testing::value_for;

class StreamTest : public ::testing::Test {
 protected:
  std::unique_ptr<Store> open(const Config& c) {
    auto s = Store::open(c);
    EXPECT_TRUE(s) << s.status().to_string();
    return s ? std::move(*s) : nullptr;
  }
  // `n` keys of `size` bytes, on flash only.
  std::vector<std::string> tiles(Store& store, int n, size_t size, int first = 0) {
    std::vector<std::string> keys;
    for (int i = first; i < first + n; ++i) {
      keys.push_back(stream_key(i));
      EXPECT_TRUE(store.put(keys.back(), value_for(i, size)));
    }
    to_flash_only(store, keys);
    return keys;
  }
  TempDir dir_;
};

TEST_F(StreamTest, RangedReadsAtChunkBoundariesMatchTheReferenceInBothTiers) {
  auto store = open(stream_config(dir_));
  const std::vector<size_t> sizes = {1, kChunk - 1, kChunk, kChunk + 1, 3 * kChunk + 5};
  std::vector<std::string> flash_keys;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(store->put("m" + std::to_string(i), value_for(i, sizes[i])));
    ASSERT_TRUE(store->put("f" + std::to_string(i), value_for(i, sizes[i])));
    flash_keys.push_back("f" + std::to_string(i));
  }
  to_flash_only(*store, flash_keys);
  std::mt19937_64 rng(42);
  for (int op = 0; op < 400; ++op) {
    const size_t i = rng() % sizes.size();
    const std::string ref = value_for(i, sizes[i]);
    // Offsets and ends near chunk boundaries, and past the end.
    auto near_boundary = [&] {
      int64_t b = static_cast<int64_t>(rng() % 5) * static_cast<int64_t>(kChunk);
      return static_cast<uint64_t>(std::max<int64_t>(b + static_cast<int64_t>(rng() % 3) - 1, 0));
    };
    const uint64_t off = near_boundary();
    const uint64_t len = rng() % 4 == 0 ? UINT64_MAX : near_boundary();
    const bool use_once = rng() % 2 == 0;
    const std::string expect = off >= ref.size() ? "" : ref.substr(off, len);
    for (const char* tier : {"m", "f"}) {
      const std::string key = tier + std::to_string(i);
      testing::RangeRead r = read_range(*store, key, off, len, use_once);
      ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
      ASSERT_EQ(r.bytes, expect) << key << " [" << off << ", +" << len << ")";
      if (r.where != ReadStart::Where::kFlash || expect.empty()) continue;
      // Only the chunks of the range are read from flash: fewer if memory
      // holds some of them (promoted on hit, then evicted chunk by chunk).
      const uint64_t first = off / kChunk, last = (off + expect.size() - 1) / kChunk;
      EXPECT_LE(r.chunks_issued, last - first + 1) << key;
    }
  }
}

TEST_F(StreamTest, UseOnceReadsNeverPromoteButPlainReadsDo) {
  Config c = stream_config(dir_);
  c.promotion_threshold = 2;
  auto store = open(c);
  tiles(*store, 2, kChunk);
  for (int i = 0; i < 5; ++i) {
    testing::RangeRead r = read_range(*store, stream_key(0), 0, UINT64_MAX, true);
    ASSERT_EQ(r.where, ReadStart::Where::kFlash);
    ASSERT_EQ(r.bytes, value_for(0, kChunk));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(StoreTiers::memory(*store).contains(stream_key(0)));
  for (int i = 0; i < 3; ++i) read_range(*store, stream_key(1), 0, UINT64_MAX, false);
  EXPECT_TRUE(eventually([&] { return StoreTiers::memory(*store).contains(stream_key(1)); }));
}

TEST_F(StreamTest, UseOnceLaneObjectIsDroppedOnceServedUnlessReadPlainly) {
  auto store = open(stream_config(dir_));
  ASSERT_TRUE(store->put("scan", value_for(1, 100), WriteOptions{.use_once = true}));
  ASSERT_TRUE(store->put("hot", value_for(2, 100), WriteOptions{.use_once = true}));
  ASSERT_TRUE(store->persist_all().is_ok());  // clean: dropping loses nothing
  // A plain read takes "hot" out of the lane: it is not use-once for that reader.
  EXPECT_EQ(read_range(*store, "hot", 0, UINT64_MAX, false).bytes, value_for(2, 100));
  EXPECT_FALSE(store->residency("hot")->chunks[0].use_once);
  const uint64_t dropped = StoreTiers::memory(*store).use_once_dropped();
  EXPECT_EQ(read_range(*store, "scan", 0, UINT64_MAX, true).bytes, value_for(1, 100));
  EXPECT_EQ(read_range(*store, "hot", 0, UINT64_MAX, true).bytes, value_for(2, 100));
  EXPECT_FALSE(StoreTiers::memory(*store).contains("scan"));
  EXPECT_TRUE(StoreTiers::memory(*store).contains("hot"));
  EXPECT_EQ(StoreTiers::memory(*store).use_once_dropped(), dropped + 1);
  // Dropped from memory, still on flash.
  EXPECT_EQ(read_range(*store, "scan", 0, UINT64_MAX, true).bytes, value_for(1, 100));
}

TEST_F(StreamTest, ServesEveryKeyInOrderAndNeverReadsPastTheEnd) {
  auto store = open(stream_config(dir_));
  std::vector<std::string> keys = tiles(*store, 30, kChunk + 7);
  auto stream =
      store->open_stream(keys, StreamOptions{.depth = 4, .channels = 2, .use_once = true});
  for (int i = 0; i < 30; ++i) {
    Result<StreamValue> v = stream->next();
    ASSERT_TRUE(v) << i << ": " << v.status().to_string();
    EXPECT_EQ(v->key(), keys[i]);
    std::string got;
    v->append_to(got);
    ASSERT_EQ(got, value_for(i, kChunk + 7)) << i;
  }
  EXPECT_EQ(stream->next().status().code(), StatusCode::kOutOfRange);
  StreamCounts n = stream->counts();
  EXPECT_LE(n.issued, 30u);
  // A key the consumer reached while its look-ahead read was only being
  // started counts as wasted (and is read plainly): rare, but possible.
  EXPECT_EQ(n.hits + n.late + n.wasted, n.issued);
  EXPECT_LE(n.wasted, 2u);
  EXPECT_FALSE(stream->active());
  // Nothing was promoted, and the lane gave back all it was charged.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (const std::string& k : keys) EXPECT_FALSE(StoreTiers::memory(*store).contains(k)) << k;
  // The lane's charge goes when the read's completion lets go of the entry,
  // just after the consumer has the value.
  EXPECT_TRUE(eventually([&] { return StoreTiers::memory(*store).use_once_bytes() == 0; }))
      << StoreTiers::memory(*store).use_once_bytes();
}

TEST_F(StreamTest, LookAheadStaysWithinDepthAndResetDropsIt) {
  auto store = open(stream_config(dir_));
  std::vector<std::string> keys = tiles(*store, 12, 1000);
  auto stream =
      store->open_stream(keys, StreamOptions{.depth = 3, .channels = 3, .use_once = true});
  ASSERT_TRUE(eventually([&] { return stream->counts().issued == 3; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(stream->counts().issued, 3u);  // no consumer: no more than D ahead
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(stream->next());
  ASSERT_TRUE(eventually([&] { return stream->counts().issued == 12; }))
      << stream->counts().issued << " pos " << stream->position();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(stream->counts().issued, 12u);  // never past the last key
  stream->reset();
  EXPECT_FALSE(stream->active());
  EXPECT_EQ(stream->counts().wasted, 2u);
  // Reads go on, in order, without look-ahead.
  Result<StreamValue> v = stream->next();
  ASSERT_TRUE(v);
  EXPECT_EQ(v->key(), keys[10]);
  EXPECT_EQ(stream->counts().issued, 12u);
  // The lane's charge goes when the read's completion lets go of the entry,
  // just after the consumer has the value.
  EXPECT_TRUE(eventually([&] { return StoreTiers::memory(*store).use_once_bytes() == 0; }))
      << StoreTiers::memory(*store).use_once_bytes();
}

TEST_F(StreamTest, OutOfOrderReadEndsTheLookAhead) {
  auto store = open(stream_config(dir_));
  std::vector<std::string> keys = tiles(*store, 10, 1000);
  auto stream =
      store->open_stream(keys, StreamOptions{.depth = 4, .channels = 4, .use_once = false});
  ASSERT_TRUE(eventually([&] { return stream->counts().issued == 4; }));
  testing::RangeRead first = testing::read_blocking(
      [&](FlashReadCallbacks cb) { return stream->read(keys[0], 0, UINT64_MAX, std::move(cb)); });
  EXPECT_EQ(first.bytes, value_for(0, 1000));
  // Reading the key just served again (a value read in parts) is in order.
  testing::RangeRead part = testing::read_blocking(
      [&](FlashReadCallbacks cb) { return stream->read(keys[0], 10, 20, std::move(cb)); });
  EXPECT_EQ(part.bytes, value_for(0, 1000).substr(10, 20));
  EXPECT_TRUE(stream->active());
  testing::RangeRead other = testing::read_blocking(
      [&](FlashReadCallbacks cb) { return stream->read(keys[7], 0, UINT64_MAX, std::move(cb)); });
  EXPECT_EQ(other.bytes, value_for(7, 1000));
  EXPECT_FALSE(stream->active());
  const uint64_t issued = stream->counts().issued;
  EXPECT_EQ(stream->counts().wasted, issued - 1);  // all but key 0, dropped unread
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(stream->counts().issued, issued);
}

TEST_F(StreamTest, KeysDeletedOrRewrittenMidStreamAreNeverServedStale) {
  auto store = open(stream_config(dir_));
  std::vector<std::string> keys = tiles(*store, 8, 2 * kChunk + 3);
  auto stream =
      store->open_stream(keys, StreamOptions{.depth = 8, .channels = 8, .use_once = true});
  ASSERT_TRUE(eventually([&] { return stream->counts().issued == 8; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // read ahead, whole
  ASSERT_TRUE(store->remove(keys[3]));
  ASSERT_TRUE(store->put(keys[5], value_for(500, 77)));
  for (int i = 0; i < 8; ++i) {
    Result<StreamValue> v = stream->next();
    if (i == 3) {
      EXPECT_EQ(v.status().code(), StatusCode::kNotFound);
      continue;
    }
    ASSERT_TRUE(v) << i;
    std::string got;
    v->append_to(got);
    EXPECT_EQ(got, i == 5 ? value_for(500, 77) : value_for(i, 2 * kChunk + 3)) << i;
  }
  EXPECT_EQ(stream->counts().wasted, 2u);
}

// The version check at take time looks the key up in both tiers: a key
// rewritten and moved to flash after it was read ahead (so that flash, not
// memory, holds the new version) is read again, whole, in its new version.
TEST_F(StreamTest, KeysRewrittenOnFlashMidStreamAreReadAgainWhole) {
  auto store = open(stream_config(dir_));
  std::vector<std::string> keys = tiles(*store, 6, kChunk + 5);
  auto stream =
      store->open_stream(keys, StreamOptions{.depth = 6, .channels = 6, .use_once = true});
  ASSERT_TRUE(eventually([&] { return stream->counts().issued == 6; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // read ahead, whole
  ASSERT_TRUE(store->put(keys[2], value_for(200, 2 * kChunk + 1)));
  to_flash_only(*store, {keys[2]});
  ASSERT_TRUE(store->remove(keys[4]));
  for (int i = 0; i < 6; ++i) {
    Result<StreamValue> v = stream->next();
    if (i == 4) {
      EXPECT_EQ(v.status().code(), StatusCode::kNotFound);
      continue;
    }
    ASSERT_TRUE(v) << i;
    EXPECT_EQ(v->version(), store->stat(keys[i])->version) << i;
    std::string got;
    v->append_to(got);
    EXPECT_EQ(got, i == 2 ? value_for(200, 2 * kChunk + 1) : value_for(i, kChunk + 5)) << i;
  }
  EXPECT_EQ(stream->counts().wasted, 2u);
}

// A consumer slow next to the read latency leaves the refill to the ends of
// the reads in flight: the look-ahead still keeps up, never runs more than
// D ahead, and serves every value whole.
TEST_F(StreamTest, LookAheadRefilledByReadEndsStaysWithinDepth) {
  Config c = stream_config(dir_);
  c.backing_latency_ns = 200'000;
  auto store = open(c);
  const int n = 40;
  std::vector<std::string> keys = tiles(*store, n, 1000);
  const uint32_t depth = 8;
  auto stream =
      store->open_stream(keys, StreamOptions{.depth = depth, .channels = 2, .use_once = true});
  for (int i = 0; i < n; ++i) {
    Result<StreamValue> v = stream->next();
    ASSERT_TRUE(v) << i << ": " << v.status().to_string();
    std::string got;
    v->append_to(got);
    ASSERT_EQ(got, value_for(i, 1000)) << i;
    EXPECT_LE(stream->counts().issued, stream->position() + depth) << i;
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(300);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  StreamCounts counts = stream->counts();
  EXPECT_EQ(counts.issued, static_cast<uint64_t>(n));
  EXPECT_EQ(counts.hits + counts.late, counts.issued);
  // D * C = 2.4 ms hides L = 0.2 ms several times over: most values wait
  // for nothing (a loaded machine may delay a few).
  EXPECT_GE(counts.hits, static_cast<uint64_t>(n / 2));
  // The lane's charge goes when the read's completion lets go of the entry,
  // just after the consumer has the value.
  EXPECT_TRUE(eventually([&] { return StoreTiers::memory(*store).use_once_bytes() == 0; }))
      << StoreTiers::memory(*store).use_once_bytes();
}

TEST_F(StreamTest, UseOnceScanNeverEvictsTheHotSet) {
  Config c = stream_config(dir_);
  c.promotion_threshold = 1;
  c.eviction_policy = EvictionPolicyKind::kLru;
  auto store = open(c);
  // 6 MiB of scan data stream past 2.5 MiB of hot data in 8 MiB of memory.
  std::vector<std::string> scan = tiles(*store, 96, kChunk, 1000);
  for (int i = 0; i < 40; ++i)
    ASSERT_TRUE(store->put("hot" + std::to_string(i), value_for(i, kChunk)));
  const uint64_t evicted = store->stats().memory.evicted_objects;
  for (int pass = 0; pass < 3; ++pass) {
    auto stream =
        store->open_stream(scan, StreamOptions{.depth = 8, .channels = 4, .use_once = true});
    while (stream->next()) {
    }
  }
  int resident = 0;
  for (int i = 0; i < 40; ++i)
    resident += StoreTiers::memory(*store).contains("hot" + std::to_string(i));
  EXPECT_EQ(resident, 40);
  EXPECT_GT(StoreTiers::memory(*store).use_once_dropped(), 0u);
  EXPECT_EQ(store->stats().memory.evicted_objects, evicted);
  // The same scan read plainly is promoted (threshold 1) and pushes hot data out.
  auto hot_resident = [&] {
    int n = 0;
    for (int i = 0; i < 40; ++i)
      n += StoreTiers::memory(*store).contains("hot" + std::to_string(i));
    return n;
  };
  for (int pass = 0; pass < 3 && hot_resident() == 40; ++pass) {
    for (const std::string& k : scan) read_range(*store, k, 0, UINT64_MAX, false);
    eventually([&] { return hot_resident() < 40; }, 500);
  }
  EXPECT_LT(hot_resident(), 40);
}

TEST_F(StreamTest, AutomaticDepthFollowsLatencyOverPace) {
  Config c = stream_config(dir_);
  c.backing_latency_ns = 2'000'000;  // far above any per-take overhead (sanitizers too)
  auto store = open(c);
  std::vector<std::string> keys = tiles(*store, 40, 1000);
  // Measure L first: the automatic depth reads the latency histogram at open.
  for (int i = 0; i < 8; ++i) read_range(*store, keys[i], 0, UINT64_MAX, true);
  // L = 2 ms over C of about 50 us: D grows as the consumer's pace beats
  // L / D, whatever the per-take overhead. A consumer preempted for most of
  // the pass (two test suites on two cores) may not beat it: up to three
  // passes, one must grow D.
  uint32_t depth = 0;
  for (int attempt = 0; attempt < 3 && depth < 3; ++attempt) {
    auto stream =
        store->open_stream(keys, StreamOptions{.depth = -1, .channels = 8, .use_once = true});
    EXPECT_EQ(stream->depth(), 2u);  // before any pace is known
    for (int i = 0; i < 40; ++i) {
      ASSERT_TRUE(stream->next());
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    depth = stream->depth();
    EXPECT_LE(depth, 64u);
  }
  EXPECT_GE(depth, 3u);
}

}  // namespace
}  // namespace tierkv
