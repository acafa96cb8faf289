// Flash reads are pulled: a reader that does not consume holds at most its
// window, all readers together hold at most flash-read-buffer, and a
// cancelled read stops. Pieces arrive on flash threads (also run under
// ThreadSanitizer in CI).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

#include "flash/flash_tier.h"
#include "store/store.h"
#include "store/store_tiers.h"

namespace tierkv {
namespace {

constexpr uint32_t kChunk = 64 << 10;
// What one full chunk's buffer is charged: data plus one 4 KiB block.
constexpr int64_t kCharge = kChunk + 4096;

std::string value_for(int i, size_t n) {
  std::string s(n, '\0');
  for (size_t j = 0; j < n; ++j) s[j] = static_cast<char>((j * 131 + static_cast<size_t>(i)) % 251);
  return s;
}

std::string key_for(int i) {
  return "big:" + std::to_string(i);
}

// Pieces of several reads, kept until the test drops them.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int, ValuePiece>> pieces;
  int done = 0;
  std::vector<Status> results;
  std::vector<std::string> bytes;
  // Highest flash_read_buffer_used seen when a piece arrived.
  int64_t max_used = 0;

  explicit Collector(int reads) : results(reads), bytes(reads) {}

  int64_t peak_used() {
    std::lock_guard lock(mu);
    return max_used;
  }

  FlashReadCallbacks callbacks(Store& store, int read) {
    return {[this, &store, read](ValuePiece p) {
              int64_t used = store.stats().flash_read_buffer_used;
              std::lock_guard lock(mu);
              max_used = std::max(max_used, used);
              pieces.emplace_back(read, std::move(p));
              cv.notify_all();
            },
            [this, read](Status s) {
              std::lock_guard lock(mu);
              results[static_cast<size_t>(read)] = std::move(s);
              ++done;
              cv.notify_all();
            }};
  }
  // Waits (at most 10 s) until `pred` holds; false on timeout.
  template <typename Pred>
  bool wait(Pred pred) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return pred(); });
  }
  // Takes the oldest piece, copies its bytes and drops it.
  bool consume_one() {
    std::unique_lock lock(mu);
    if (pieces.empty()) return false;
    auto [read, piece] = std::move(pieces.front());
    pieces.pop_front();
    bytes[static_cast<size_t>(read)].append(piece.bytes);
    lock.unlock();
    return true;  // `piece` goes here, outside the lock
  }
};

class FlashReadWindowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/tierkv-window-XXXXXX";
    ASSERT_NE(::mkdtemp(dir_.data()), nullptr);
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void open(int64_t read_buffer) {
    Config c;
    c.memory = 8 << 20;
    c.chunk_size = kChunk;
    c.memory_shards = 4;
    c.active_expire_hz = 0;
    c.flash_path = dir_ + "/flash.dat";
    c.flash_size = 64 << 20;
    c.region_size = 1 << 20;
    c.flash_preallocate = false;
    c.promotion_threshold = 255;  // no copies into memory: reads stay on flash
    c.flash_read_buffer = read_buffer;
    auto s = Store::open(c);
    ASSERT_TRUE(s) << s.status().to_string();
    store_ = std::move(*s);
  }
  // Writes `n` values of `chunks` chunks each, then pushes them to flash.
  void write_flash_values(int n, int chunks) {
    size_t size = size_t{kChunk} * static_cast<size_t>(chunks) - 100;
    for (int i = 0; i < n; ++i) ASSERT_TRUE(store_->put(key_for(i), value_for(i, size)));
    // Which values eviction takes first depends on timing (offloads land
    // asynchronously; slower under sanitizers): fill until all left memory,
    // every chunk (a clean object leaves memory chunk by chunk).
    std::string filler(kChunk, 'f');
    auto off_memory = [&](int i) {
      std::optional<ObjectResidency> r = store_->residency(key_for(i));
      return r && !r->in_memory;
    };
    auto all_on_flash = [&] {
      for (int i = 0; i < n; ++i)
        if (!off_memory(i)) return false;
      return true;
    };
    for (int i = 0; i < 2000 && (i < 200 || !all_on_flash()); ++i) {
      ASSERT_TRUE(store_->put("fill:" + std::to_string(i % 400), filler));
      if (i % 100 == 99) StoreTiers::flash(*store_)->flush();
    }
    StoreTiers::flash(*store_)->flush();
    for (int i = 0; i < n; ++i) ASSERT_TRUE(off_memory(i)) << key_for(i);
  }
  size_t value_size(int chunks) const { return size_t{kChunk} * static_cast<size_t>(chunks) - 100; }

  std::string dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(FlashReadWindowTest, ReaderThatNeverConsumesHoldsOnlyItsWindow) {
  open(int64_t{64} << 20);
  write_flash_values(1, 20);
  Collector col(1);
  ReadStart r = store_->read(key_for(0), 0, UINT64_MAX, col.callbacks(*store_, 0),
                             ReadOptions::windowed(ReadWindow{.depth = 3, .parallel = 2}));
  ASSERT_EQ(r.where, ReadStart::Where::kFlash);
  ASSERT_NE(r.flash_read, nullptr);
  ASSERT_TRUE(col.wait([&] { return col.pieces.size() == 3; }));
  // Nothing past the window was read, and only the window is charged.
  EXPECT_EQ(r.flash_read->chunks_issued(), 3u);
  EXPECT_EQ(r.flash_read->chunks_held(), 3u);
  EXPECT_EQ(store_->stats().flash_read_buffer_used, 3 * kCharge);
  {
    std::lock_guard lock(col.mu);
    EXPECT_EQ(col.pieces.size(), 3u);
    EXPECT_EQ(col.done, 0);
  }
  // Draining pulls the rest, never more than 3 chunks held.
  while (true) {
    if (!col.consume_one()) {
      std::unique_lock lock(col.mu);
      if (col.done == 1 && col.pieces.empty()) break;
      ASSERT_TRUE(col.cv.wait_for(lock, std::chrono::seconds(10),
                                  [&] { return !col.pieces.empty() || col.done == 1; }));
      continue;
    }
    EXPECT_LE(r.flash_read->chunks_held(), 3u);
  }
  EXPECT_TRUE(col.results[0].is_ok()) << col.results[0].to_string();
  EXPECT_EQ(col.bytes[0], value_for(0, value_size(20)));
  EXPECT_EQ(r.flash_read->chunks_issued(), 20u);
  EXPECT_LE(col.peak_used(), 3 * kCharge);
  EXPECT_EQ(store_->stats().flash_read_buffer_used, 0);
}

TEST_F(FlashReadWindowTest, AllReadersTogetherStayUnderTheBufferCap) {
  const int64_t cap = 4 * kCharge;  // four chunk buffers for the whole process
  open(cap);
  constexpr int kReaders = 6;
  write_flash_values(kReaders, 10);
  Collector col(kReaders);
  std::vector<ReadStart> reads;
  for (int i = 0; i < kReaders; ++i) {
    reads.push_back(store_->read(key_for(i), 0, UINT64_MAX, col.callbacks(*store_, i),
                                 ReadOptions::windowed(ReadWindow{.depth = 4, .parallel = 4})));
    ASSERT_EQ(reads.back().where, ReadStart::Where::kFlash);
  }
  ASSERT_TRUE(col.wait([&] { return col.pieces.size() == 4; }));
  StoreStats st = store_->stats();
  EXPECT_EQ(st.flash_read_buffer_used, cap);
  EXPECT_EQ(st.flash_read_buffer_limit, cap);
  EXPECT_GT(st.flash_read_buffer_waits, 0u);
  uint64_t issued = 0;
  for (const ReadStart& r : reads) issued += r.flash_read->chunks_issued();
  EXPECT_EQ(issued, 4u);
  // A consumer drains everything; waiting reads get the released room.
  while (true) {
    if (!col.consume_one()) {
      std::unique_lock lock(col.mu);
      if (col.done == kReaders && col.pieces.empty()) break;
      ASSERT_TRUE(col.cv.wait_for(lock, std::chrono::seconds(10),
                                  [&] { return !col.pieces.empty() || col.done == kReaders; }));
      continue;
    }
    EXPECT_LE(store_->stats().flash_read_buffer_used, cap);
  }
  for (int i = 0; i < kReaders; ++i) {
    EXPECT_TRUE(col.results[static_cast<size_t>(i)].is_ok());
    EXPECT_EQ(col.bytes[static_cast<size_t>(i)], value_for(i, value_size(10))) << i;
  }
  EXPECT_LE(col.peak_used(), cap);
  EXPECT_EQ(store_->stats().flash_read_buffer_used, 0);
}

TEST_F(FlashReadWindowTest, DrainedReaderIsNotStarvedByStalledOnes) {
  const int64_t cap = 3 * kCharge;
  open(cap);
  constexpr int kReaders = 4;
  write_flash_values(kReaders, 8);
  Collector col(kReaders);
  std::vector<ReadStart> reads;
  for (int i = 0; i < kReaders; ++i)
    reads.push_back(store_->read(key_for(i), 0, UINT64_MAX, col.callbacks(*store_, i),
                                 ReadOptions::windowed(ReadWindow{.depth = 2, .parallel = 2})));
  ASSERT_TRUE(col.wait([&] { return col.pieces.size() == 3; }));
  // Only read 0 is consumed; the others never are. It still completes.
  auto take_read0 = [&] {
    std::unique_lock lock(col.mu);
    for (auto it = col.pieces.begin(); it != col.pieces.end(); ++it) {
      if (it->first != 0) continue;
      ValuePiece p = std::move(it->second);
      col.pieces.erase(it);
      col.bytes[0].append(p.bytes);
      lock.unlock();
      return true;
    }
    return false;
  };
  while (true) {
    if (take_read0()) continue;
    std::unique_lock lock(col.mu);
    if (!col.results[0].is_ok() || col.bytes[0].size() == value_size(8)) break;
    ASSERT_TRUE(col.cv.wait_for(lock, std::chrono::seconds(10),
                                [&] {
                                  for (auto& [r, p] : col.pieces)
                                    if (r == 0) return true;
                                  return false;
                                }))
        << "read 0 starved after " << col.bytes[0].size() << " bytes";
  }
  EXPECT_EQ(col.bytes[0], value_for(0, value_size(8)));
  EXPECT_LE(col.peak_used(), cap);
  for (ReadStart& r : reads) r.flash_read->cancel();
  ASSERT_TRUE(col.wait([&] { return col.done == kReaders; }));
}

TEST_F(FlashReadWindowTest, CancelStopsTheReadAndGivesBuffersBack) {
  open(int64_t{64} << 20);
  write_flash_values(1, 20);
  Collector col(1);
  ReadStart r = store_->read(key_for(0), 0, UINT64_MAX, col.callbacks(*store_, 0),
                             ReadOptions::windowed(ReadWindow{.depth = 2, .parallel = 2}));
  ASSERT_EQ(r.where, ReadStart::Where::kFlash);
  ASSERT_TRUE(col.wait([&] { return col.pieces.size() == 2; }));
  r.flash_read->cancel();
  ASSERT_TRUE(col.wait([&] { return col.done == 1; }));
  EXPECT_EQ(col.results[0].code(), StatusCode::kUnavailable);
  while (col.consume_one()) {
  }
  EXPECT_EQ(r.flash_read->chunks_issued(), 2u);
  EXPECT_EQ(r.flash_read->chunks_held(), 0u);
  EXPECT_EQ(store_->stats().flash_read_buffer_used, 0);
}

TEST_F(FlashReadWindowTest, BlockingGetAndRangesStillReadWhole) {
  open(2 * kCharge);  // room for one chunk buffer at a time
  write_flash_values(2, 12);
  auto v = store_->get(key_for(1));
  ASSERT_TRUE(v) << v.status().to_string();
  EXPECT_EQ(v->to_string(), value_for(1, value_size(12)));
  auto part = store_->get(key_for(0), kChunk - 10, 3 * kChunk);
  ASSERT_TRUE(part) << part.status().to_string();
  EXPECT_EQ(part->to_string(), value_for(0, value_size(12)).substr(kChunk - 10, 3 * kChunk));
  EXPECT_EQ(store_->stats().flash_read_buffer_used, 0);
}

}  // namespace
}  // namespace tierkv
