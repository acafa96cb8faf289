// BufferPool: a buffer given back is the next one of its size taken, idle
// buffers never pass the room the owner allows, and an idle pool drains.
#include "core/buffer_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace tierkv {
namespace {

constexpr size_t kBuffer = 64 << 10;

TEST(BufferPoolTest, ABufferGivenBackIsTheNextOneTaken) {
  BufferPool pool(
      kBuffer, [] { return int64_t{1} << 30; }, kBuffer);
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
  BufferPool pool(
      kBuffer, [] { return int64_t{1} << 30; }, kBuffer / 4);
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
  BufferPool full_only(
      kBuffer, [] { return int64_t{1} << 30; }, 4 * kBuffer);
  EXPECT_TRUE(full_only.take(kBuffer).pooled());
  EXPECT_FALSE(full_only.take(kBuffer / 2).pooled());
}

// Buffers are kept by size: a size given back is reused only by takes that
// round to it, and idle bytes count every size.
TEST(BufferPoolTest, EachSizeHasItsOwnFreeList) {
  BufferPool pool(
      kBuffer, [] { return int64_t{1} << 30; }, kBlockSize);
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
  BufferPool pool(
      kBuffer, [&] { return room.load(); }, kBuffer);
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
  BufferPool pool(
      kBuffer, [] { return int64_t{1} << 30; }, kBuffer);
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
  BufferPool pool(
      kBuffer, [&] { return room.load(); }, kBlockSize);
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
