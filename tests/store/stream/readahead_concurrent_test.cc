// Readahead racing overwrites: sequential ranged reads of one flash object
// while another thread rewrites it (and puts it back on flash) see one
// version whole or an error, never mixed bytes, and give back every byte of
// the use-once lane. Also run under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
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

TEST(ReadaheadConcurrentTest, ReadsRacingOverwritesSeeOneVersionWholeOrAnError) {
  TempDir dir;
  Config c = stream_config(dir);
  c.promotion_on_hit = false;
  auto opened = Store::open(c);
  ASSERT_TRUE(opened) << opened.status().to_string();
  std::unique_ptr<Store> store = std::move(*opened);
  const size_t size = 12 * kChunk + 77;
  const std::string v[2] = {value_for(10, size), value_for(11, size)};
  testing::place_on_flash(*store, "k", 10, size);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; i < 40 && !stop.load(); ++i) {
      testing::place_on_flash(*store, "k", 10 + (i + 1) % 2, size);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    stop.store(true);
  });
  std::mt19937_64 rng(7);
  auto ra = store->open_readahead();
  uint64_t off = 0, reads = 0, errors = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!stop.load() && reads < 100'000 && std::chrono::steady_clock::now() < deadline) {
    const uint64_t len = 1 + rng() % (2 * kChunk);
    testing::RangeRead r = testing::readahead_read(*ra, "k", off, len);
    ++reads;
    if (!r.status.is_ok()) {
      ++errors;
      off = 0;
      continue;
    }
    const bool whole = r.bytes == v[0].substr(off, len) || r.bytes == v[1].substr(off, len);
    ASSERT_TRUE(whole) << "mixed bytes at " << off << " +" << len;
    off = off + r.bytes.size() >= size ? 0 : off + r.bytes.size();
  }
  stop.store(true);
  writer.join();
  EXPECT_GT(reads, 10u);
  EXPECT_LT(errors, reads);
  EXPECT_GT(ra->counts().hits + ra->counts().late, 0u);
  ra.reset();
  EXPECT_TRUE(eventually([&] { return StoreTiers::memory(*store).use_once_bytes() == 0; }));
}

}  // namespace
}  // namespace tierkv
