// BufferPool: a buffer given back is the next one of its size taken, idle
// buffers never pass the room the owner allows, and an idle pool drains.
#include "core/buffer_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <vector>

namespace tierkv {
namespace {

constexpr size_t kBuffer = 64 << 10;

TEST(BufferPoolTest, ABufferGivenBackIsTheNextOneTaken) {
  BufferPool pool({.buffer_size = kBuffer, .min_size = kBuffer}, [] { return int64_t{1} << 30; });
  char* first = nullptr;
  {
    AlignedBuffer b = pool.take(kBuffer);
    ASSERT_TRUE(b.pooled());
    EXPECT_EQ(b.size(), kBuffer);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kBlockSize, 0u);
    first = b.data();
    b.data()[kBuffer - 1] = 'x';  // the whole buffer is writable
  }
  EXPECT_EQ(pool.stats().idle_bytes, static_cast<int64_t>(kBuffer));
  AlignedBuffer again = pool.take(kBuffer - 100);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(pool.stats().reused, 1u);
  EXPECT_EQ(pool.stats().fresh, 1u);
  EXPECT_EQ(pool.stats().idle_bytes, 0);
}

TEST(BufferPoolTest, BuffersUnderTheMinimumOrOverTheSizeAreNotPooled) {
  BufferPool pool({.buffer_size = kBuffer, .min_size = kBuffer / 4},
                  [] { return int64_t{1} << 30; });
  AlignedBuffer small = pool.take(kBuffer / 4 - kBlockSize);
  AlignedBuffer big = pool.take(kBuffer + 1);
  EXPECT_FALSE(small.pooled());
  EXPECT_FALSE(big.pooled());
  EXPECT_EQ(big.size(), kBuffer + kBlockSize);
  EXPECT_TRUE(pool.take(kBuffer / 4).pooled());
  small.reset();
  big.reset();
  EXPECT_EQ(pool.stats().fresh, 1u);  // only the pooled one
  // A minimum above the buffer size still pools full buffers.
  BufferPool full_only({.buffer_size = kBuffer, .min_size = 4 * kBuffer},
                       [] { return int64_t{1} << 30; });
  EXPECT_TRUE(full_only.take(kBuffer).pooled());
  EXPECT_FALSE(full_only.take(kBuffer / 2).pooled());
}

// A pool with a finer granule (one whose buffers only take copies) rounds
// to whole granules, not blocks, and keeps a free list per granule count.
TEST(BufferPoolTest, AFinerGranuleRoundsToItsOwnMultiple) {
  BufferPool pool({.buffer_size = kBuffer,
                   .min_size = kBuffer / 4,
                   .granule = 1024,
                   .alignment = alignof(std::max_align_t)},
                  [] { return int64_t{1} << 30; });
  EXPECT_EQ(pool.rounded(50000), 50176u);  // 49 granules, where blocks take 53,248
  char* first = nullptr;
  {
    AlignedBuffer b = pool.take(50000);
    ASSERT_TRUE(b.pooled());
    EXPECT_EQ(b.size(), 50176u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % alignof(std::max_align_t), 0u);
    first = b.data();
    b.data()[b.size() - 1] = 'x';
  }
  EXPECT_EQ(pool.stats().idle_bytes, 50176);
  AlignedBuffer other = pool.take(49000);  // 48 granules: a class of its own
  EXPECT_NE(other.data(), first);
  EXPECT_EQ(other.size(), 49152u);
  AlignedBuffer again = pool.take(49153);  // 49 granules
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(pool.stats().fresh, 2u);
  EXPECT_EQ(pool.stats().reused, 1u);
  EXPECT_FALSE(pool.take(kBuffer / 4 - 1025).pooled());  // a granule under the minimum
  EXPECT_TRUE(pool.take(kBuffer / 4 - 1).pooled());      // rounds up to it
}

// Buffers are kept by size: a size given back is reused only by takes that
// round to it, and idle bytes count every size.
TEST(BufferPoolTest, EachSizeHasItsOwnFreeList) {
  BufferPool pool({.buffer_size = kBuffer, .min_size = kBlockSize},
                  [] { return int64_t{1} << 30; });
  char* quarter = nullptr;
  char* half = nullptr;
  {
    AlignedBuffer q = pool.take(kBuffer / 4 - 10);
    AlignedBuffer h = pool.take(kBuffer / 2);
    EXPECT_EQ(q.size(), kBuffer / 4);
    quarter = q.data();
    half = h.data();
  }
  EXPECT_EQ(pool.stats().idle_bytes, static_cast<int64_t>(kBuffer / 4 + kBuffer / 2));
  AlignedBuffer h = pool.take(kBuffer / 2 - 100);
  AlignedBuffer q = pool.take(kBuffer / 4);
  EXPECT_EQ(h.data(), half);
  EXPECT_EQ(q.data(), quarter);
  AlignedBuffer other = pool.take(kBuffer / 8);  // no such size idle
  EXPECT_EQ(pool.stats().reused, 2u);
  EXPECT_EQ(pool.stats().fresh, 3u);
  EXPECT_EQ(pool.stats().idle_bytes, 0);
}

TEST(BufferPoolTest, IdleBuffersStayWithinTheRoomAndTrimFollowsItDown) {
  std::atomic<int64_t> room{3 * static_cast<int64_t>(kBuffer)};
  BufferPool pool({.buffer_size = kBuffer, .min_size = kBuffer}, [&] { return room.load(); });
  std::vector<AlignedBuffer> held;
  for (int i = 0; i < 5; ++i) held.push_back(pool.take(kBuffer));
  held.clear();  // 5 come back, 3 fit
  EXPECT_EQ(pool.stats().idle_bytes, 3 * static_cast<int64_t>(kBuffer));
  EXPECT_EQ(pool.stats().returned, 2u);
  room = static_cast<int64_t>(kBuffer);
  pool.trim();
  EXPECT_EQ(pool.stats().idle_bytes, static_cast<int64_t>(kBuffer));
  room = 0;
  AlignedBuffer b = pool.take(kBuffer);
  EXPECT_EQ(pool.stats().reused, 1u);
  b.reset();  // no room: freed, not kept
  EXPECT_EQ(pool.stats().idle_bytes, 0);
}

TEST(BufferPoolTest, ReleaseIdleDrainsWhatNoTakeNeeded) {
  BufferPool pool({.buffer_size = kBuffer, .min_size = kBuffer}, [] { return int64_t{1} << 30; });
  {
    std::vector<AlignedBuffer> held;
    for (int i = 0; i < 8; ++i) held.push_back(pool.take(kBuffer));
  }
  pool.release_idle();  // the first interval had takes: it only sets the mark
  int calls = 1;
  while (pool.stats().idle_bytes > 0 && calls < 12) {
    pool.release_idle();
    ++calls;
  }
  EXPECT_EQ(pool.stats().idle_bytes, 0);
  EXPECT_EQ(pool.stats().returned, 8u);

  // A pool in use keeps what its takes need: each interval takes and gives
  // back 4 of 4, so the low-water mark is 0 and nothing is released.
  {
    std::vector<AlignedBuffer> held;
    for (int i = 0; i < 4; ++i) held.push_back(pool.take(kBuffer));
  }
  for (int round = 0; round < 3; ++round) {
    pool.release_idle();
    std::vector<AlignedBuffer> held;
    for (int i = 0; i < 4; ++i) held.push_back(pool.take(kBuffer));
  }
  EXPECT_EQ(pool.stats().idle_bytes, 4 * static_cast<int64_t>(kBuffer));
}

// Trim gives back the largest idle buffers first, until the idle bytes are
// within the room again.
TEST(BufferPoolTest, TrimFreesTheLargestSizesFirst) {
  std::atomic<int64_t> room{int64_t{1} << 30};
  BufferPool pool({.buffer_size = kBuffer, .min_size = kBlockSize}, [&] { return room.load(); });
  {
    std::vector<AlignedBuffer> held;
    held.push_back(pool.take(kBuffer));
    held.push_back(pool.take(kBuffer / 4));
    held.push_back(pool.take(kBuffer / 4));
  }
  room = static_cast<int64_t>(kBuffer / 2);
  pool.trim();
  EXPECT_EQ(pool.stats().idle_bytes, static_cast<int64_t>(kBuffer / 2));
  EXPECT_EQ(pool.stats().returned, 1u);
  AlignedBuffer q = pool.take(kBuffer / 4);
  EXPECT_EQ(pool.stats().reused, 1u);
}

}  // namespace
}  // namespace tierkv
