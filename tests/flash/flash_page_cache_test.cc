// Page-cache reads (FlashOptions::page_cache_reads, buffered I/O only): a
// demand read whose bytes are all cached is copied, verified and called
// back on the submitting thread before read_chunk() returns; anything else
// (a background read, bytes not cached, the option off, direct I/O) goes to
// the engine and completes on its threads. Either way the bytes are the
// ones written, and a damaged record is a miss.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <iterator>
#include <thread>

#include "flash/flash_tier.h"
#include "flash_test_util.h"

namespace tierkv::flash {
namespace {

using testing::flip_byte;
using testing::pattern;
using testing::small_options;
using testing::TempDir;
using testing::write_sync;

uint64_t page_cache_reads(MetricsRegistry& m) {
  return m.counter("tierkv_flash_page_cache_reads_total", "").value();
}

struct Delivery {
  Result<std::string> bytes = Status::not_found("no callback");
  bool before_return = false;  // the callback ran before read_chunk() returned
  std::thread::id thread;
};

Delivery read_once(FlashTier& tier, std::string_view key,
                   ReadPriority priority = ReadPriority::kDemand) {
  auto done = std::make_shared<std::promise<Delivery>>();
  auto returned = std::make_shared<std::atomic<bool>>(false);
  const uint32_t chunk = 0;
  tier.read_chunks(
      key, std::span(&chunk, 1), std::nullopt,
      [done, returned](uint32_t, Result<FlashChunk> r) {
        Delivery d;
        d.before_return = !returned->load();
        d.thread = std::this_thread::get_id();
        d.bytes = r.is_ok() ? Result<std::string>(std::string(r->data()))
                            : Result<std::string>(r.status());
        done->set_value(std::move(d));
      },
      nullptr, priority);
  returned->store(true);
  return done->get_future().get();
}

std::unique_ptr<FlashTier> buffered_tier(const std::string& path, MetricsRegistry& metrics,
                                         bool page_cache_reads,
                                         IoBackend backend = IoBackend::kUring) {
  FlashOptions o = small_options(path);
  o.direct_io = false;
  o.page_cache_reads = page_cache_reads;
  o.io_backend = backend;
  auto tier = FlashTier::open(o, &metrics);
  EXPECT_TRUE(tier.is_ok()) << tier.status().to_string();
  return tier.is_ok() ? std::move(*tier) : nullptr;
}

class FlashPageCacheTest : public ::testing::Test {
 protected:
  std::unique_ptr<FlashTier> open(bool page_cache_reads) {
    return buffered_tier(dir_.file("flash.dat"), metrics_, page_cache_reads);
  }
  TempDir dir_;
  MetricsRegistry metrics_;
};

TEST_F(FlashPageCacheTest, CachedDemandReadsCompleteOnTheCallerBeforeReturning) {
  for (IoBackend backend : {IoBackend::kUring, IoBackend::kThreadPool}) {
    SCOPED_TRACE(backend == IoBackend::kUring ? "io_uring" : "threads");
    TempDir dir;
    MetricsRegistry m;
    std::unique_ptr<FlashTier> opened = buffered_tier(dir.file("f"), m, true, backend);
    ASSERT_TRUE(opened);
    FlashTier& tier = *opened;
    const std::vector<size_t> sizes = {1, 200, 4096, 100'000, 500'000};
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::string key = "k" + std::to_string(i);
      ASSERT_TRUE(
          write_sync(tier, {.key = key, .version = 1, .data = pattern(sizes[i], i)}).is_ok());
    }
    // Just written through the page cache: every byte is there.
    for (size_t i = 0; i < sizes.size(); ++i) {
      const uint64_t before = page_cache_reads(m);
      const Delivery d = read_once(tier, "k" + std::to_string(i));
      ASSERT_TRUE(d.bytes.is_ok()) << d.bytes.status().to_string();
      EXPECT_EQ(*d.bytes, pattern(sizes[i], i));
      EXPECT_TRUE(d.before_return);
      EXPECT_EQ(d.thread, std::this_thread::get_id());
      EXPECT_EQ(page_cache_reads(m), before + 1);
    }
  }
}

TEST_F(FlashPageCacheTest, BackgroundReadsAndTheOptionOffGoToTheEngine) {
  {
    auto tier = open(/*page_cache_reads=*/true);
    ASSERT_TRUE(tier);
    ASSERT_TRUE(write_sync(*tier, {.key = "k", .version = 1, .data = pattern(5000, 1)}).is_ok());
    const Delivery d = read_once(*tier, "k", ReadPriority::kBackground);
    EXPECT_EQ(*d.bytes, pattern(5000, 1));
    EXPECT_NE(d.thread, std::this_thread::get_id());
    EXPECT_EQ(page_cache_reads(metrics_), 0u);
  }
  MetricsRegistry m;
  TempDir dir;
  std::unique_ptr<FlashTier> tier = buffered_tier(dir.file("f"), m, false);
  ASSERT_TRUE(tier);
  ASSERT_TRUE(write_sync(*tier, {.key = "k", .version = 1, .data = pattern(5000, 2)}).is_ok());
  const Delivery d = read_once(*tier, "k");
  EXPECT_EQ(*d.bytes, pattern(5000, 2));
  EXPECT_NE(d.thread, std::this_thread::get_id());  // the engine's thread
  EXPECT_EQ(page_cache_reads(m), 0u);
}

// Bytes the page cache no longer holds come from the engine; the read is
// the same. (Which path it takes is the kernel's to decide: not asserted.)
TEST_F(FlashPageCacheTest, UncachedBytesStillReadWhole) {
  auto tier = open(true);
  ASSERT_TRUE(tier);
  const std::string value = pattern(300'000, 3);
  ASSERT_TRUE(write_sync(*tier, {.key = "k", .version = 1, .data = value}).is_ok());
  tier->flush();
  const int fd = ::open(dir_.file("flash.dat").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fdatasync(fd), 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
  const Delivery d = read_once(*tier, "k");
  ASSERT_TRUE(d.bytes.is_ok()) << d.bytes.status().to_string();
  EXPECT_EQ(*d.bytes, value);
}

// Damage in the cached bytes is caught as on the engine's path: a miss,
// counted, and the chunk leaves the index.
TEST_F(FlashPageCacheTest, DamagedCachedRecordIsAMiss) {
  auto tier = open(true);
  ASSERT_TRUE(tier);
  const std::string value = pattern(30'000, 4);
  ASSERT_TRUE(write_sync(*tier, {.key = "victim", .version = 1, .data = value}).is_ok());
  ASSERT_TRUE(write_sync(*tier, {.key = "bystander", .version = 1, .data = "fine"}).is_ok());
  tier->flush();
  std::ifstream in(dir_.file("flash.dat"), std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = file.find(value.substr(1000, 64));
  ASSERT_NE(at, std::string::npos);
  flip_byte(dir_.file("flash.dat"), at + 10, 0x20);
  const uint64_t before = page_cache_reads(metrics_);
  const Delivery d = read_once(*tier, "victim");
  EXPECT_EQ(page_cache_reads(metrics_), before + 1);
  ASSERT_FALSE(d.bytes.is_ok());
  EXPECT_EQ(d.bytes.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tier->stats().checksum_failures, 1u);
  EXPECT_FALSE(tier->contains("victim", 0));
  EXPECT_EQ(*read_once(*tier, "bystander").bytes, "fine");
}

}  // namespace
}  // namespace tierkv::flash
