#include "flash/flash_tier.h"
#include "flash/io_engine.h"
#include "flash/record.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/metrics.h"
#include "tests/flash/flash_test_util.h"

namespace tierkv::flash {
namespace {

using testing::pattern;
using testing::read_sync;
using testing::small_options;
using testing::TempDir;
using testing::write_sync;

class FlashTierBackendTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  FlashOptions options() {
    FlashOptions o = small_options(dir_.file("flash.dat"));
    o.io_backend = GetParam();
    return o;
  }
  TempDir dir_;
};

TEST_P(FlashTierBackendTest, WriteThenReadBack) {
  MetricsRegistry metrics;
  auto tier = FlashTier::open(options(), &metrics);
  ASSERT_TRUE(tier.is_ok()) << tier.status().to_string();
  FlashTier& t = **tier;
  EXPECT_EQ(t.io_backend(), GetParam() == IoBackend::kThreadPool ? "thread-pool" : "io_uring");
  EXPECT_TRUE(t.direct_io());  // /tmp here is ext4

  const std::string a = pattern(100'000, 1);
  const std::string b = pattern(1 << 20, 2);
  ASSERT_TRUE(
      write_sync(t, {.key = "a", .chunk_index = 0, .version = 1, .object_size = 100'000, .data = a})
          .is_ok());
  ASSERT_TRUE(write_sync(t, {.key = "b", .chunk_index = 3, .version = 9, .data = b}).is_ok());
  Result<std::string> ra = read_sync(t, "a", 0);
  ASSERT_TRUE(ra.is_ok()) << ra.status().to_string();
  EXPECT_EQ(*ra, a);
  EXPECT_EQ(*read_sync(t, "b", 3, 9), b);
  EXPECT_EQ(read_sync(t, "b", 3, 8).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(read_sync(t, "b", 2).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(read_sync(t, "c", 0).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(t.contains("b", 3, 9));

  auto info = t.lookup("a");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->version, 1u);
  EXPECT_EQ(info->object_size, 100'000u);

  // A newer version replaces the older one's chunks; writing an older one conflicts.
  ASSERT_TRUE(write_sync(t, {.key = "a", .chunk_index = 0, .version = 2, .data = "new"}).is_ok());
  EXPECT_EQ(*read_sync(t, "a", 0), "new");
  EXPECT_EQ(write_sync(t, {.key = "a", .chunk_index = 0, .version = 1, .data = "old"}).code(),
            StatusCode::kConflict);
  EXPECT_TRUE(t.remove("a", 2));
  EXPECT_EQ(read_sync(t, "a", 0).status().code(), StatusCode::kNotFound);

  FlashStats s = t.stats();
  EXPECT_EQ(s.chunks, 1u);
  EXPECT_EQ(s.reads, 3u);  // version and index misses never reach the device
  EXPECT_GT(s.write_amplification, 1.0);
  const std::string text = metrics.render_prometheus();
  for (const char* name :
       {"tierkv_flash_bytes_used", "tierkv_flash_bytes_free", "tierkv_flash_records",
        "tierkv_flash_regions", "tierkv_flash_reclaims_total", "tierkv_flash_reinsertions_total",
        "tierkv_flash_reads_total", "tierkv_flash_read_bytes_total", "tierkv_flash_read_latency",
        "tierkv_flash_write_bytes_total", "tierkv_flash_write_amplification_permille",
        "tierkv_flash_checksum_failures_total"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
}

TEST_P(FlashTierBackendTest, BatchedWritesAndReads) {
  auto tier = FlashTier::open(options());
  ASSERT_TRUE(tier.is_ok());
  FlashTier& t = **tier;
  std::vector<std::string> data;
  std::vector<ChunkWrite> writes;
  for (uint32_t i = 0; i < 40; ++i) data.push_back(pattern(50'000 + i, i));
  for (uint32_t i = 0; i < 40; ++i) {
    writes.push_back(
        {.key = "obj", .chunk_index = i, .version = 3, .chunk_count = 40, .data = data[i]});
  }
  std::promise<Status> written;
  ASSERT_TRUE(t.write_chunks(writes, [&](Status s) { written.set_value(s); }).is_ok());
  ASSERT_TRUE(written.get_future().get().is_ok());
  EXPECT_EQ(t.lookup("obj")->chunks.size(), 40u);

  std::vector<uint32_t> wanted;
  for (uint32_t i = 0; i < 42; ++i) wanted.push_back(i);  // 40, 41 are absent
  std::mutex mu;
  std::vector<int> got(42, 0);
  std::atomic<int> remaining{42};
  std::promise<void> all;
  t.read_chunks("obj", wanted, 3, [&](uint32_t i, Result<FlashChunk> r) {
    {
      std::lock_guard lock(mu);
      got[i] = r.is_ok() ? (r->data() == data[i] ? 1 : -1) : 2;
    }
    if (--remaining == 0) all.set_value();
  });
  all.get_future().get();
  for (uint32_t i = 0; i < 40; ++i) EXPECT_EQ(got[i], 1) << i;
  EXPECT_EQ(got[40], 2);
  EXPECT_EQ(got[41], 2);
}

INSTANTIATE_TEST_SUITE_P(Backends, FlashTierBackendTest,
                         ::testing::Values(IoBackend::kUring, IoBackend::kThreadPool),
                         [](const auto& info) {
                           return info.param == IoBackend::kUring ? "uring" : "threads";
                         });

// 16 MiB in 1 MiB regions (after the superblocks): 16 regions, 4 records
// each. Writing ~3x that wraps the log.
FlashOptions reclaim_options(const std::string& path) {
  FlashOptions o = small_options(path);
  o.size = layout_size(16, 1 << 20);
  o.region_size = 1 << 20;
  o.write_buffer_size = 256 << 10;
  return o;
}
constexpr size_t kQuarterRegion = (256 << 10) - 8192;

TEST(FlashTierTest, ReclaimsOldestRegionsFirst) {
  TempDir dir;
  auto tier = FlashTier::open(reclaim_options(dir.file("f")));
  ASSERT_TRUE(tier.is_ok());
  FlashTier& t = **tier;
  const int n = 200;  // 200 x 256 KiB records
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(write_sync(t, {.key = "k" + std::to_string(i),
                               .chunk_index = 0,
                               .version = 1,
                               .data = pattern(kQuarterRegion, i)})
                    .is_ok());
  }
  FlashStats s = t.stats();
  EXPECT_GT(s.reclaims, 0u);
  EXPECT_LE(s.used_bytes, s.capacity_bytes);
  EXPECT_EQ(s.regions_used, 16u);
  // The newest ~45 records are readable; the oldest are gone, in FIFO order.
  int first_present = -1;
  for (int i = 0; i < n; ++i) {
    const bool present = t.contains("k" + std::to_string(i), 0);
    if (present && first_present < 0) first_present = i;
    if (first_present >= 0) {
      EXPECT_TRUE(present) << "hole at " << i << " after " << first_present;
    }
  }
  EXPECT_GT(first_present, 100);
  EXPECT_LT(first_present, n - 40);
  EXPECT_EQ(read_sync(t, "k0", 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*read_sync(t, "k" + std::to_string(n - 1), 0), pattern(kQuarterRegion, n - 1));
  EXPECT_EQ(*read_sync(t, "k" + std::to_string(first_present), 0),
            pattern(kQuarterRegion, first_present));
}

TEST(FlashTierTest, HitBasedReinsertionKeepsReadChunks) {
  for (bool reinsertion : {false, true}) {
    TempDir dir;
    FlashOptions o = reclaim_options(dir.file("f"));
    o.reinsertion = reinsertion;
    auto tier = FlashTier::open(o);
    ASSERT_TRUE(tier.is_ok());
    FlashTier& t = **tier;
    const std::string hot = pattern(50'000, 77);
    ASSERT_TRUE(write_sync(t, {.key = "hot", .chunk_index = 0, .version = 1, .data = hot}).is_ok());
    ASSERT_TRUE(read_sync(t, "hot", 0).is_ok());
    for (int i = 0; i < 300; ++i) {
      ASSERT_TRUE(write_sync(t, {.key = "cold" + std::to_string(i),
                                 .chunk_index = 0,
                                 .version = 1,
                                 .data = pattern(125'000, i)})
                      .is_ok());
      // Reinsertion runs beside the writers; let it keep up, as a real
      // writer's pace would.
      if (reinsertion) {
        ASSERT_TRUE(t.wait_for_reclaimer());
      }
      // Keep reading it so each reinserted copy counts as hit again.
      if (i % 50 == 0 && reinsertion) {
        EXPECT_TRUE(read_sync(t, "hot", 0).is_ok()) << i;
      }
    }
    t.flush();
    const FlashStats s = t.stats();
    EXPECT_GT(s.reclaims, 16u);
    if (reinsertion) {
      EXPECT_GT(s.reinsertions, 0u);
      EXPECT_EQ(*read_sync(t, "hot", 0), hot);
    } else {
      EXPECT_EQ(s.reinsertions, 0u);
      EXPECT_FALSE(t.contains("hot", 0));
    }
  }
}

// A read chunk whose object the tier above holds (held_elsewhere) is not
// copied forward: reclaim drops it like a cold one (once its region is
// reclaimed), and only the object the tier above does not hold is reinserted.
TEST(FlashTierTest, ReinsertionSkipsObjectsHeldElsewhere) {
  TempDir dir;
  FlashOptions o = reclaim_options(dir.file("f"));
  o.reinsertion = true;
  std::atomic<int> asked_for_held{0};
  o.held_elsewhere = [&](std::string_view key, uint64_t version) {
    if (key != "held") return false;
    EXPECT_EQ(version, 1u);
    asked_for_held.fetch_add(1);
    return true;
  };
  auto tier = FlashTier::open(o);
  ASSERT_TRUE(tier.is_ok());
  FlashTier& t = **tier;
  for (const char* key : {"held", "alone"}) {
    ASSERT_TRUE(
        write_sync(t, {.key = key, .chunk_index = 0, .version = 1, .data = pattern(50'000, 3)})
            .is_ok());
    ASSERT_TRUE(read_sync(t, key, 0).is_ok());  // both hot
  }
  // Until the region holding both is reclaimed: "held" stays readable in
  // place until then, and is not copied.
  for (int i = 0; i < 300 && (asked_for_held.load() == 0 || t.contains("held", 0)); ++i) {
    ASSERT_TRUE(write_sync(t, {.key = "cold" + std::to_string(i),
                               .chunk_index = 0,
                               .version = 1,
                               .data = pattern(125'000, i)})
                    .is_ok());
    ASSERT_TRUE(t.wait_for_reclaimer());
  }
  t.flush();
  ASSERT_EQ(asked_for_held.load(), 1);
  EXPECT_FALSE(t.contains("held", 0));
  EXPECT_EQ(*read_sync(t, "alone", 0), pattern(50'000, 3));
  EXPECT_GE(t.stats().reinsertions, 1u);
}

// Writers never wait for a reinsertion round, so they may reclaim the region
// a round is copying from while it reads it: the region drains under the
// round's pin, the chunk being relocated is left to the round, and its copy
// lands whole and readable, and is found again by a crash scan.
TEST(FlashTierTest, AWriterReclaimingARegionMidRoundLeavesItsCopyWhole) {
  TempDir dir;
  FlashOptions o = reclaim_options(dir.file("f"));
  o.reinsertion = true;
  FlashTier* tier_seen = nullptr;
  bool refilled = false;
  o.after_reinsert_read = [&] {
    if (refilled || tier_seen == nullptr) return;
    refilled = true;
    // More than the device holds: every region written before the round,
    // its own included, is reclaimed by these writes.
    for (int i = 0; i < 24; ++i) {
      EXPECT_TRUE(write_sync(*tier_seen, {.key = "mid" + std::to_string(i),
                                          .chunk_index = 0,
                                          .version = 1,
                                          .data = pattern(3 * kQuarterRegion, 500 + i)})
                      .is_ok());
    }
  };
  const std::string hot = pattern(50'000, 77);
  {
    auto tier = FlashTier::open(o);
    ASSERT_TRUE(tier.is_ok());
    FlashTier& t = **tier;
    ASSERT_TRUE(write_sync(t, {.key = "hot", .chunk_index = 0, .version = 1, .data = hot}).is_ok());
    ASSERT_TRUE(read_sync(t, "hot", 0).is_ok());  // read: its region's round copies it
    tier_seen = &t;
    ASSERT_TRUE(testing::write_cold_until(t, kQuarterRegion, refilled));
    ASSERT_TRUE(t.wait_for_reclaimer());
    t.flush();
    tier_seen = nullptr;
    EXPECT_GE(t.stats().reinsertions, 1u);
    EXPECT_EQ(t.stats().regions_draining, 0u);
    EXPECT_EQ(t.stats().checksum_failures, 0u);
    EXPECT_EQ(*read_sync(t, "hot", 0), hot);
    EXPECT_FALSE(t.contains("cold0", 0));  // its region went while the round read
  }
  auto tier = FlashTier::open(o);  // no snapshot: the index comes from a scan
  ASSERT_TRUE(tier.is_ok());
  EXPECT_EQ(*read_sync(**tier, "hot", 0), hot);
  EXPECT_EQ(*read_sync(**tier, "mid23", 0), pattern(3 * kQuarterRegion, 523));
}

// Reinsertion fills part of the new head region; a record too large for the
// rest must go to the region after, never past the region's end.
TEST(FlashTierTest, LargeRecordsAfterReinsertionStayInsideRegions) {
  TempDir dir;
  FlashOptions o = reclaim_options(dir.file("f"));
  o.reinsertion = true;
  auto tier = FlashTier::open(o);
  ASSERT_TRUE(tier.is_ok());
  FlashTier& t = **tier;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(
        write_sync(t, {.key = "hot" + std::to_string(i), .version = 1, .data = pattern(120'000, i)})
            .is_ok());
  }
  const size_t big = (1 << 20) - 3 * 4096;
  for (int i = 0; i < 40; ++i) {
    for (int h = 0; h < 8; ++h) (void)read_sync(t, "hot" + std::to_string(h), 0);
    ASSERT_TRUE(
        write_sync(t,
                   {.key = "big" + std::to_string(i), .version = 1, .data = pattern(big, 100 + i)})
            .is_ok());
    ASSERT_TRUE(t.wait_for_reclaimer());
  }
  EXPECT_GT(t.stats().reinsertions, 0u);
  EXPECT_EQ(t.stats().checksum_failures, 0u);
  for (int i = 30; i < 40; ++i) {
    Result<std::string> got = read_sync(t, "big" + std::to_string(i), 0);
    ASSERT_TRUE(got.is_ok()) << i << ": " << got.status().to_string();
    EXPECT_EQ(*got, pattern(big, 100 + i));
  }
  for (int h = 0; h < 8; ++h) {
    Result<std::string> got = read_sync(t, "hot" + std::to_string(h), 0);
    if (got.is_ok()) {
      EXPECT_EQ(*got, pattern(120'000, h));
    }
  }
}

TEST(FlashTierTest, ErrorsAreStatusesNotCrashes) {
  TempDir dir;
  // Unopenable paths.
  FlashOptions o = small_options("/proc/tierkv-no-such/flash.dat");
  auto r = FlashTier::open(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_NE(r.status().message().find("cannot open"), std::string::npos);
  o.path = "/proc/version";  // exists, not writable
  EXPECT_EQ(FlashTier::open(o).status().code(), StatusCode::kIOError);
  // A size the file system cannot hold: ENOSPC before anything is allocated.
  o = small_options(dir.file("huge"));
  o.size = uint64_t{1} << 50;
  o.region_size = uint64_t{1} << 30;
  r = FlashTier::open(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("ENOSPC"), std::string::npos) << r.status().to_string();
  // Bad geometry.
  o = small_options(dir.file("g"));
  o.size = o.region_size;
  EXPECT_EQ(FlashTier::open(o).status().code(), StatusCode::kInvalidArgument);
  o.region_size = 5000;
  EXPECT_EQ(FlashTier::open(o).status().code(), StatusCode::kInvalidArgument);
  o = small_options(dir.file("g"));
  for (double area : {0.0, -1.0, 0.51}) {
    o.snapshot_area = area;
    EXPECT_EQ(FlashTier::open(o).status().code(), StatusCode::kInvalidArgument) << area;
  }

  // A chunk larger than a region is refused; the callback never runs.
  o = small_options(dir.file("ok"));
  auto tier = FlashTier::open(o);
  ASSERT_TRUE(tier.is_ok());
  const std::string big(4 << 20, 'x');
  bool called = false;
  Status st = (*tier)->write_chunk({.key = "big", .version = 1, .data = big},
                                   [&](Status) { called = true; });
  EXPECT_EQ(st.code(), StatusCode::kTooLarge);
  EXPECT_EQ((*tier)->write_chunk({.key = "", .version = 1, .data = "x"}, [](Status) {}).code(),
            StatusCode::kInvalidArgument);
  (*tier)->flush();
  EXPECT_FALSE(called);
}

// A device that refuses writes part-way (here: a file size limit, EFBIG, as a
// stand-in for ENOSPC on a sparse file): the callbacks report IOError, nothing
// half-written is indexed, and earlier data stays readable.
TEST(FlashTierTest, DeviceWriteErrorsReachTheCallback) {
  for (IoBackend backend : {IoBackend::kUring, IoBackend::kThreadPool}) {
    TempDir dir;
    FlashOptions o = small_options(dir.file("f"));
    o.preallocate = false;  // sparse: blocks are allocated by the writes
    o.io_backend = backend;
    auto tier = FlashTier::open(o);
    ASSERT_TRUE(tier.is_ok());
    ASSERT_TRUE(write_sync(**tier, {.key = "early", .version = 1, .data = "kept"}).is_ok());
    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 6 << 20;  // writes past 6 MiB fail
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    int failed = 0;
    for (int i = 0; i < 12; ++i) {
      Status st = write_sync(
          **tier, {.key = "k" + std::to_string(i), .version = 1, .data = pattern(1 << 20, i)});
      if (!st.is_ok()) {
        EXPECT_EQ(st.code(), StatusCode::kIOError) << st.to_string();
        EXPECT_FALSE((*tier)->contains("k" + std::to_string(i), 0));
        ++failed;
      }
    }
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
    ::signal(SIGXFSZ, old_handler);
    EXPECT_GT(failed, 0);
    EXPECT_EQ(*read_sync(**tier, "early", 0), "kept");
    EXPECT_EQ(*read_sync(**tier, "k0", 0), pattern(1 << 20, 0));
    // Writes keep being tried: once the device takes them again, they land.
    for (int i = 0; i < 4; ++i) {
      const std::string key = "later" + std::to_string(i);
      ASSERT_TRUE(
          write_sync(**tier, {.key = key, .version = 2, .data = pattern(1 << 20, i)}).is_ok());
      EXPECT_EQ(*read_sync(**tier, key, 0), pattern(1 << 20, i));
    }
  }
}

// tmpfs refuses O_DIRECT on older kernels (newer ones accept it): either
// way the tier opens, says which it got, and works.
TEST(FlashTierTest, WorksWhereODirectMayBeRefused) {
  const std::string dir = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
  const std::string path = dir + "/tierkv-flash-test-" + std::to_string(::getpid());
  {
    FlashOptions o = small_options(path);
    o.size = 8 << 20;
    o.region_size = 1 << 20;
    auto tier = FlashTier::open(o);
    ASSERT_TRUE(tier.is_ok()) << tier.status().to_string();
    std::printf("[tmpfs] O_DIRECT %s\n", (*tier)->direct_io() ? "accepted" : "refused: buffered");
    ASSERT_TRUE(write_sync(**tier, {.key = "k", .version = 1, .data = pattern(9000, 1)}).is_ok());
    EXPECT_EQ(*read_sync(**tier, "k", 0), pattern(9000, 1));
  }
  std::filesystem::remove(path);
}

TEST(FlashTierTest, DirectoryPathHoldsTheFile) {
  TempDir dir;
  auto tier = FlashTier::open(small_options(dir.path() + "/sub/"));
  ASSERT_TRUE(tier.is_ok()) << tier.status().to_string();
  EXPECT_EQ((*tier)->file_path(), dir.path() + "/sub/flash.dat");
}

TEST(FlashTierTest, WriteQueueBackpressureIsBusy) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  o.max_pending_write_bytes = 1 << 20;
  o.backing_latency_ns = 0;
  auto tier = FlashTier::open(o);
  ASSERT_TRUE(tier.is_ok());
  const std::string data(600'000, 'q');
  std::atomic<int> landed{0};
  int accepted = 0;
  int busy = 0;
  for (int i = 0; i < 50; ++i) {
    Status st = (*tier)->write_chunk({.key = "k" + std::to_string(i), .version = 1, .data = data},
                                     [&](Status s) { landed += s.is_ok(); });
    if (st.is_ok()) ++accepted;
    if (st.code() == StatusCode::kBusy) ++busy;
  }
  (*tier)->flush();
  EXPECT_GT(accepted, 0);
  EXPECT_EQ(accepted + busy, 50);
  EXPECT_EQ(landed.load(), accepted);
}

// Each policy is observed through tierkv_flash_fsyncs_total (successful
// fdatasyncs): none never syncs, not even at flush(); always syncs every
// buffer write before its callback runs (both engines); everysec syncs in
// the background within about a second of a write, without a flush, and not
// once per write.
uint64_t fsyncs(MetricsRegistry& m) {
  return m.counter("tierkv_flash_fsyncs_total", "").value();
}

TEST(FlashTierTest, FsyncPoliciesWork) {
  for (IoBackend backend : {IoBackend::kUring, IoBackend::kThreadPool}) {
    SCOPED_TRACE(backend == IoBackend::kUring ? "io_uring" : "threads");
    for (FsyncPolicy p : {FsyncPolicy::kNone, FsyncPolicy::kAlways}) {
      TempDir dir;
      MetricsRegistry m;
      FlashOptions o = small_options(dir.file("f"));
      o.fsync = p;
      o.io_backend = backend;
      auto tier = FlashTier::open(o, &m);
      ASSERT_TRUE(tier.is_ok());
      for (int i = 0; i < 5; ++i) {
        const uint64_t before = fsyncs(m);
        const std::string key = "k" + std::to_string(i);
        ASSERT_TRUE(write_sync(**tier, {.key = key, .version = 1, .data = "v"}).is_ok());
        if (p == FsyncPolicy::kAlways) {
          EXPECT_GT(fsyncs(m), before) << "write " << i << " acknowledged before an fsync";
        }
        EXPECT_EQ(*read_sync(**tier, key, 0), "v");
      }
      (*tier)->flush();
      if (p == FsyncPolicy::kNone) {
        EXPECT_EQ(fsyncs(m), 0u) << "fsync none synced";
      }
    }
  }
  {
    TempDir dir;
    MetricsRegistry m;
    FlashOptions o = small_options(dir.file("f"));
    o.fsync = FsyncPolicy::kEverySec;
    auto tier = FlashTier::open(o, &m);
    ASSERT_TRUE(tier.is_ok());
    const uint64_t start = mono_ns();
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(
          write_sync(**tier, {.key = "k" + std::to_string(i), .version = 1, .data = "v"}).is_ok());
    }
    const double seconds = static_cast<double>(mono_ns() - start) / 1e9;
    EXPECT_LE(static_cast<double>(fsyncs(m)), seconds + 1.0) << "everysec synced every write";
    // The background sync comes within about a second; no flush() here.
    const uint64_t deadline = mono_ns() + 10'000'000'000ull;
    while (fsyncs(m) == 0 && mono_ns() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling, bounded
    }
    EXPECT_GE(fsyncs(m), 1u) << "no background fsync within 10 s of the writes";
    EXPECT_EQ(*read_sync(**tier, "k0", 0), "v");
  }
  EXPECT_EQ(*parse_fsync_policy("everysec"), FsyncPolicy::kEverySec);
  EXPECT_FALSE(parse_fsync_policy("sometimes").is_ok());
}

// backing_latency_ns adds a fixed delay to each read. The contract: every
// modelled read takes at least the model's latency, and the median takes no
// more than the model plus the unmodelled read plus 10% of the model. The
// extra of the median over the model is compared with the whole unmodelled
// read, not with zero: on the thread-pool engine most of an unmodelled read
// is the wake-up of an idle worker (~25 us), and a worker that has just spun
// through the last stretch of a deadline wakes faster, so "with minus
// without" fell below the model (177 us for 200 us in CI) while each read
// still paid the whole model. Buffered I/O keeps the device part small; the
// two tiers are read alternately so that machine noise hits both alike;
// reads are timed from the call to the callback; medians shrug off reads
// preempted by another test. The test also runs alone under ctest
// (flash_backing_latency, RUN_SERIAL). It fails if the knob is ignored (a
// read under 200 us) or slept with sleep_for and the default 50 us timer
// slack (+50..100 us over the model). Repeated up to five times; one must hold.
struct LatencySample {
  double unmodelled_median_us = -1;
  double modelled_median_us = -1;
  double modelled_min_us = -1;
};

LatencySample read_latency_us(IoBackend backend, uint64_t model_ns) {
  TempDir dir;
  std::unique_ptr<FlashTier> tiers[2];
  for (int t = 0; t < 2; ++t) {
    FlashOptions o = small_options(dir.file("f" + std::to_string(t)));
    o.backing_latency_ns = t == 0 ? 0 : model_ns;
    o.io_backend = backend;
    o.direct_io = false;
    auto tier = FlashTier::open(o);
    EXPECT_TRUE(tier.is_ok());
    if (!tier.is_ok()) return {};
    tiers[t] = std::move(*tier);
    for (int i = 0; i < 8; ++i) {
      EXPECT_TRUE(
          write_sync(*tiers[t],
                     {.key = "k" + std::to_string(i), .version = 1, .data = pattern(8000, i)})
              .is_ok());
    }
  }
  std::vector<uint64_t> samples[2];
  for (int i = 0; i < 1000; ++i) {
    const int t = i % 2;
    std::promise<uint64_t> completed;
    const uint64_t start = mono_ns();
    Status st = tiers[t]->read_chunk("k" + std::to_string(i % 8), 0, std::nullopt,
                                     [&](Result<FlashChunk> r) {
                                       EXPECT_TRUE(r.is_ok());
                                       completed.set_value(mono_ns());
                                     });
    EXPECT_TRUE(st.is_ok());
    if (st.is_ok()) samples[t].push_back(completed.get_future().get() - start);
  }
  for (auto& s : samples) {
    if (s.empty()) return {};
    std::sort(s.begin(), s.end());
  }
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  LatencySample out{.unmodelled_median_us = us(samples[0][samples[0].size() / 2]),
                    .modelled_median_us = us(samples[1][samples[1].size() / 2]),
                    .modelled_min_us = us(samples[1].front())};
  std::printf(
      "[latency] %s: median read %.1f us; with a %.0f us model: median %.1f us, min %.1f us\n",
      backend == IoBackend::kUring ? "io_uring" : "threads", out.unmodelled_median_us, us(model_ns),
      out.modelled_median_us, out.modelled_min_us);
  return out;
}

// The bandwidth model: reads in flight share the modelled link, so one read
// costs at least its bytes / bandwidth, and four submitted together end no
// sooner than four transfers after they start (checked by lower bounds only,
// which load cannot break: the model only ever waits longer).
TEST(FlashTierTest, BackingBandwidthIsSharedByReadsInFlight) {
  constexpr uint64_t kBytes = 8000;
  constexpr uint64_t kBandwidth = 400'000;  // bytes/s: one read >= 20 ms
  constexpr uint64_t kTransferNs = kBytes * 1'000'000'000 / kBandwidth;
  for (IoBackend backend : {IoBackend::kUring, IoBackend::kThreadPool}) {
    TempDir dir;
    FlashOptions o = small_options(dir.file("f"));
    o.backing_bandwidth = kBandwidth;
    o.io_backend = backend;
    o.direct_io = false;
    auto tier = FlashTier::open(o);
    ASSERT_TRUE(tier.is_ok());
    ASSERT_TRUE(write_sync(**tier, {.key = "k", .version = 1, .data = pattern(kBytes, 1)}).is_ok());
    auto timed_reads = [&](int n) {
      std::atomic<int> left{n};
      std::promise<void> all_done;
      const uint64_t start = mono_ns();
      for (int i = 0; i < n; ++i) {
        Status st = (*tier)->read_chunk("k", 0, std::nullopt, [&](Result<FlashChunk> r) {
          EXPECT_TRUE(r.is_ok());
          if (left.fetch_sub(1) == 1) all_done.set_value();
        });
        EXPECT_TRUE(st.is_ok());
      }
      all_done.get_future().wait();
      return mono_ns() - start;
    };
    EXPECT_GE(timed_reads(1), kTransferNs) << "one read beat its transfer time";
    EXPECT_GE(timed_reads(4), 4 * kTransferNs) << "reads in flight did not share the link";
  }
}

TEST(FlashTierTest, BackingLatencyIsPrecise) {
  constexpr double kModelUs = 200.0;
  // Besides the unmodelled read, a modelled one pays one more wake-up of a
  // sleeping thread (the reaper's timed wait). On the shared 2-core VM that
  // cost 50-60 us on some days (2026-12-02: unmodelled median 10 us, modelled
  // 259 us on an idle machine, five runs in a row), 10 us on others; a
  // sleep-based model that overshoots by a fraction of L still fails.
  constexpr double kWakeUpUs = 60.0;
  for (IoBackend backend : {IoBackend::kUring, IoBackend::kThreadPool}) {
    bool held = false;
    for (int attempt = 0; attempt < 5 && !held; ++attempt) {
      const LatencySample s = read_latency_us(backend, 200'000);
      ASSERT_GE(s.modelled_min_us, kModelUs)
          << "a modelled read finished before the model's latency";
      held = s.modelled_median_us <= kModelUs + s.unmodelled_median_us + kWakeUpUs;
    }
    EXPECT_TRUE(held) << "no run whose median stayed within the model + the unmodelled read + "
                         "one wake-up";
  }
}

// The model under parallel reads: a read submitted while earlier ones wait
// out their modelled latency pays L from its own completion, not from the
// end of the one before. Reads are submitted every 30 us (a consumer faster
// than L = 100 us, as in the look-ahead pipeline). Serialized delivery (a
// reaper that waits for one deadline without watching the ring) makes read
// n wait ~n * (L - 30 us): the last 16 of 64 reads take ~3 ms longer than
// the first 16. Parallel reads take the same time early and late, whatever
// load slows them all, so the contract is checked by that growth: at most
// 1 ms, a third of what serializing adds (under a compile on the other core
// the growth wanders by a few hundred us either way). The median is only printed: with a compile on
// the other core the reaper itself waits ~1.5 ms for the CPU, early and late alike (what one read
// costs is BackingLatencyIsPrecise's contract). Repeated up to five times; one must hold.
double median_us(std::vector<uint64_t> ns) {
  std::sort(ns.begin(), ns.end());
  return static_cast<double>(ns[ns.size() / 2]) / 1000.0;
}

// The median latency of the last quarter of the reads minus the first's.
double staggered_latency_growth_us(IoBackend backend, uint64_t model_ns, uint64_t gap_ns) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  o.backing_latency_ns = model_ns;
  o.io_backend = backend;
  o.direct_io = false;
  auto tier = FlashTier::open(o);
  EXPECT_TRUE(tier.is_ok());
  if (!tier.is_ok()) return 1e9;
  EXPECT_TRUE(write_sync(**tier, {.key = "k", .version = 1, .data = pattern(8000, 1)}).is_ok());
  constexpr int kReads = 64;
  std::vector<uint64_t> started(kReads), finished(kReads);
  std::atomic<int> left{kReads};
  std::promise<void> all_done;
  for (int i = 0; i < kReads; ++i) {
    started[i] = mono_ns();
    Status st = (*tier)->read_chunk("k", 0, std::nullopt, [&, i](Result<FlashChunk> r) {
      EXPECT_TRUE(r.is_ok());
      finished[i] = mono_ns();
      if (left.fetch_sub(1) == 1) all_done.set_value();
    });
    EXPECT_TRUE(st.is_ok());
    if (!st.is_ok()) return 1e9;
    while (mono_ns() < started[i] + gap_ns) {
    }
  }
  all_done.get_future().wait();
  std::vector<uint64_t> latency(kReads);
  for (int i = 0; i < kReads; ++i) latency[i] = finished[i] - started[i];
  const auto quarter = static_cast<ptrdiff_t>(kReads / 4);
  const double first = median_us({latency.begin(), latency.begin() + quarter});
  const double last = median_us({latency.end() - quarter, latency.end()});
  const double median = median_us(latency);
  std::printf(
      "[latency] %s: staggered reads every %.0f us, %.0f us model: median %.1f us, first "
      "quarter %.1f, last %.1f\n",
      backend == IoBackend::kUring ? "io_uring" : "threads", static_cast<double>(gap_ns) / 1000.0,
      static_cast<double>(model_ns) / 1000.0, median, first, last);
  return last - first;
}

TEST(FlashTierTest, BackingLatencyStaysParallelForStaggeredReads) {
  constexpr double kMaxGrowthUs = 1000.0;
  for (IoBackend backend : {IoBackend::kUring, IoBackend::kThreadPool}) {
    bool held = false;
    for (int attempt = 0; attempt < 5 && !held; ++attempt) {
      held = staggered_latency_growth_us(backend, 100'000, 30'000) <= kMaxGrowthUs;
    }
    EXPECT_TRUE(held) << "staggered modelled reads queued behind each other";
  }
}

}  // namespace
}  // namespace tierkv::flash

namespace tierkv::flash {
namespace {

// Holds every read until released, and remembers the order in which reads
// reached it (their offsets).
class HoldingEngine final : public IoEngine {
 public:
  explicit HoldingEngine(std::unique_ptr<IoEngine> inner) : inner_(std::move(inner)) {}
  void submit(std::span<IoRequest* const> requests) override {
    std::vector<IoRequest*> now;
    {
      std::lock_guard lock(mu_);
      for (IoRequest* r : requests) {
        if (r->op == IoRequest::Op::kRead && holding_) {
          held_.push_back(r);
          order_.push_back(r->offset);
        } else {
          now.push_back(r);
        }
      }
    }
    if (!now.empty()) inner_->submit(now);
  }
  std::string_view name() const override { return inner_->name(); }
  void hold() {
    std::lock_guard lock(mu_);
    holding_ = true;
  }
  // Sends the oldest held read to the device; false if none is held.
  bool release_one() {
    IoRequest* r = nullptr;
    {
      std::lock_guard lock(mu_);
      if (held_.empty()) return false;
      r = held_.front();
      held_.erase(held_.begin());
    }
    inner_->submit(std::span<IoRequest* const>(&r, 1));
    return true;
  }
  std::vector<uint64_t> order() {
    std::lock_guard lock(mu_);
    return order_;
  }
  size_t held() {
    std::lock_guard lock(mu_);
    return held_.size();
  }

 private:
  std::unique_ptr<IoEngine> inner_;
  std::mutex mu_;
  bool holding_ = false;
  std::vector<IoRequest*> held_;
  std::vector<uint64_t> order_;
};

// Demand reads go ahead of background (promotion) reads in the device
// queue, and background reads hold at most half of it: with a queue of 2,
// 4 background reads then 4 demand reads reach the device as 1 background,
// then every demand read, then the other background ones.
TEST(FlashTierTest, DemandReadsGoAheadOfBackgroundReads) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  o.queue_depth = 2;
  HoldingEngine* engine = nullptr;
  o.wrap_engine = [&engine](std::unique_ptr<IoEngine> inner) {
    auto e = std::make_unique<HoldingEngine>(std::move(inner));
    engine = e.get();
    return std::unique_ptr<IoEngine>(std::move(e));
  };
  auto tier = testing::open_or_die(o);
  for (const char* key : {"bg", "demand"})
    for (uint32_t i = 0; i < 4; ++i)
      ASSERT_TRUE(write_sync(*tier, {.key = key,
                                     .chunk_index = i,
                                     .version = 1,
                                     .object_size = 4 * 4096,
                                     .chunk_count = 4,
                                     .data = pattern(4096, i)})
                      .is_ok());
  engine->hold();
  std::atomic<int> done{0};
  const std::vector<uint32_t> chunks = {0, 1, 2, 3};
  auto count = [&](uint32_t, Result<FlashChunk> r) {
    EXPECT_TRUE(r.is_ok());
    ++done;
  };
  tier->read_chunks("bg", chunks, 1, count, nullptr, ReadPriority::kBackground);
  EXPECT_EQ(engine->held(), 1u) << "background reads take at most half the queue";
  tier->read_chunks("demand", chunks, 1, count, nullptr, ReadPriority::kDemand);
  EXPECT_EQ(engine->held(), 2u);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(engine->release_one());
    for (int k = 0; k < 500 && done.load() < i + 1; ++k)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(done.load(), 8);
  std::vector<uint64_t> order = engine->order();
  ASSERT_EQ(order.size(), 8u);
  // The log is appended in write order: bg's records lie below demand's.
  std::vector<uint64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  const std::set<uint64_t> bg(sorted.begin(), sorted.begin() + 4);
  const std::set<uint64_t> demand(sorted.begin() + 4, sorted.end());
  EXPECT_TRUE(bg.count(order[0]));
  for (int i = 1; i <= 4; ++i) EXPECT_TRUE(demand.count(order[i])) << "read " << i;
  for (int i = 5; i < 8; ++i) EXPECT_TRUE(bg.count(order[i])) << "read " << i;
}

// A background (promotion) read is verified on a verifier thread, never on
// the ring's completion thread that demand reads need, even on an idle
// device; a small demand read alone is verified right there.
TEST(FlashTierTest, BackgroundReadsAreVerifiedOffTheCompletionThread) {
  TempDir dir;
  auto tier = testing::open_or_die(small_options(dir.file("f")));
  ASSERT_TRUE(tier);
  if (tier->io_backend() != "io_uring") GTEST_SKIP() << "needs io_uring (one completion thread)";
  auto landed = std::make_shared<std::promise<std::thread::id>>();
  std::future<std::thread::id> reaper = landed->get_future();
  ASSERT_TRUE(tier->write_chunk({.key = "k", .version = 1, .data = pattern(4096, 1)},
                                [landed](Status st) {
                                  EXPECT_TRUE(st.is_ok()) << st.to_string();
                                  landed->set_value(std::this_thread::get_id());
                                })
                  .is_ok());
  tier->flush();
  ASSERT_EQ(reaper.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const std::thread::id reaper_id = reaper.get();
  auto read_on = [&](ReadPriority priority) {
    auto done = std::make_shared<std::promise<std::thread::id>>();
    std::future<std::thread::id> where = done->get_future();
    const std::vector<uint32_t> chunk = {0};
    tier->read_chunks(
        "k", chunk, 1,
        [done](uint32_t, Result<FlashChunk> r) {
          EXPECT_TRUE(r.is_ok()) << r.status().to_string();
          done->set_value(std::this_thread::get_id());
        },
        nullptr, priority);
    EXPECT_EQ(where.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    return where.get();
  };
  EXPECT_EQ(read_on(ReadPriority::kDemand), reaper_id) << "premise: an idle demand read";
  EXPECT_NE(read_on(ReadPriority::kBackground), reaper_id);
}

}  // namespace
}  // namespace tierkv::flash
