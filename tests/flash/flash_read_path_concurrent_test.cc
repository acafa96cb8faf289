// The read path: reads cover the record's length rounded to the O_DIRECT
// alignment (not its 4 KiB extent), and large records are verified on
// verifier threads. "concurrent" in the name: CI also runs it under TSan.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/aligned_buffer.h"
#include "flash/flash_tier.h"
#include "tests/flash/flash_test_util.h"

namespace tierkv::flash {
namespace {

using testing::pattern;
using testing::read_sync;
using testing::small_options;
using testing::TempDir;
using testing::write_sync;

constexpr size_t kHeader = 64;  // sizeof(RecordHeader)

struct ReadPathCase {
  IoBackend backend;
  bool direct;
};

class FlashReadPathTest : public ::testing::TestWithParam<ReadPathCase> {
 protected:
  FlashOptions options() {
    FlashOptions o = small_options(dir_.file("flash.dat"));
    o.io_backend = GetParam().backend;
    o.direct_io = GetParam().direct;
    return o;
  }
  TempDir dir_;
};

TEST_P(FlashReadPathTest, EveryRecordLengthReadsBackBeforeAndAfterRecovery) {
  const std::string key = "k1234567";  // 8 bytes: header + key = 72
  // Data sizes putting the record just under, at and over 512-byte units and
  // 4 KiB blocks, a 4 KiB object, and sizes either side of the verifier hand-off.
  std::vector<size_t> sizes = {0,           1,           440,    441,       439,
                               4096 - 72,   4096 - 71,   4096,   8192 - 72, 65536,
                               262144 - 73, 262144 - 72, 1 << 20};
  std::vector<std::string> values;
  {
    auto tier = FlashTier::open(options());
    ASSERT_TRUE(tier.is_ok()) << tier.status().to_string();
    if (GetParam().direct) {
      const uint32_t a = (*tier)->io_alignment();
      EXPECT_TRUE(a >= 512 && a <= 4096 && (a & (a - 1)) == 0) << a;
    } else {
      EXPECT_EQ((*tier)->io_alignment(), 1u);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      values.push_back(pattern(sizes[i], i + 1));
      ASSERT_TRUE(write_sync(**tier, {.key = key,
                                      .chunk_index = static_cast<uint32_t>(i),
                                      .version = 1,
                                      .data = values[i]})
                      .is_ok());
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      Result<std::string> r = read_sync(**tier, key, static_cast<uint32_t>(i));
      ASSERT_TRUE(r.is_ok()) << sizes[i] << ": " << r.status().to_string();
      EXPECT_EQ(*r, values[i]) << sizes[i];
    }
    EXPECT_EQ((*tier)->stats().checksum_failures, 0u);
  }
  auto tier = FlashTier::open(options());
  ASSERT_TRUE(tier.is_ok()) << tier.status().to_string();
  EXPECT_EQ((*tier)->recovery().records_recovered, sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    Result<std::string> r = read_sync(**tier, key, static_cast<uint32_t>(i));
    ASSERT_TRUE(r.is_ok()) << sizes[i] << ": " << r.status().to_string();
    EXPECT_EQ(*r, values[i]) << sizes[i];
  }
  EXPECT_EQ((*tier)->stats().checksum_failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, FlashReadPathTest,
                         ::testing::Values(ReadPathCase{IoBackend::kUring, true},
                                           ReadPathCase{IoBackend::kUring, false},
                                           ReadPathCase{IoBackend::kThreadPool, true}));

// Flips one byte of the file, wherever `needle` first occurs, through an
// O_DIRECT descriptor so that the tier's direct reads see it.
void corrupt_last_byte_of(const std::string& path, const std::string& needle) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = file.find(needle);
  ASSERT_NE(at, std::string::npos);
  const uint64_t byte = at + needle.size() - 1;
  const uint64_t block = byte / kBlockSize * kBlockSize;
  AlignedBuffer buf(kBlockSize);
  std::memcpy(buf.data(), file.data() + block, kBlockSize);
  buf.data()[byte - block] ^= 0x5a;
  const int fd = ::open(path.c_str(), O_WRONLY | O_DIRECT);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::pwrite(fd, buf.data(), kBlockSize, static_cast<off_t>(block)),
            static_cast<ssize_t>(kBlockSize));
  ::close(fd);
}

// The last data byte is inside what a shortened read covers: a flip there is
// caught, inline for a 4 KiB object and on a verifier for a large one.
TEST(FlashReadPathTest, CorruptLastByteIsCaughtSmallAndLarge) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("flash.dat"));
  auto tier = FlashTier::open(o);
  ASSERT_TRUE(tier.is_ok()) << tier.status().to_string();
  ASSERT_TRUE((*tier)->direct_io());
  const std::string key(24, 'x');
  const std::string small = pattern(4096, 7);
  const std::string large = pattern(512 << 10, 8);
  ASSERT_TRUE(
      write_sync(**tier, {.key = key, .chunk_index = 0, .version = 1, .data = small}).is_ok());
  ASSERT_TRUE(
      write_sync(**tier, {.key = key, .chunk_index = 1, .version = 1, .data = large}).is_ok());
  (*tier)->flush();
  corrupt_last_byte_of(o.path, small.substr(small.size() - 32));
  corrupt_last_byte_of(o.path, large.substr(large.size() - 32));
  EXPECT_EQ(read_sync(**tier, key, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(read_sync(**tier, key, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*tier)->stats().checksum_failures, 2u);
  EXPECT_FALSE((*tier)->contains(key, 0));  // dropped from the index
  EXPECT_FALSE((*tier)->contains(key, 1));
}

// Many large reads in flight from two threads, then the tier is destroyed at
// once: every callback runs exactly once, on an I/O thread, before the
// destructor returns, with the right bytes.
TEST(FlashReadPathTest, LargeReadsCompleteOnceBeforeDestruction) {
  for (IoBackend backend : {IoBackend::kUring, IoBackend::kThreadPool}) {
    TempDir dir;
    FlashOptions o = small_options(dir.file("flash.dat"));
    o.io_backend = backend;
    o.queue_depth = 8;  // some reads wait in the tier's queue
    constexpr int kChunks = 12;
    constexpr int kReadsPerThread = 60;
    std::vector<std::string> values;
    auto opened = FlashTier::open(o);
    ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
    std::unique_ptr<FlashTier> tier = std::move(*opened);
    for (int i = 0; i < kChunks; ++i) {
      // Alternate large (verifier) and small (inline) records.
      values.push_back(pattern(i % 2 == 0 ? (300 << 10) + i : 3000 + i, 100 + i));
      ASSERT_TRUE(write_sync(*tier, {.key = "obj",
                                     .chunk_index = static_cast<uint32_t>(i),
                                     .version = 1,
                                     .data = values[i]})
                      .is_ok());
    }
    std::vector<std::atomic<int>> calls(2 * kReadsPerThread);
    std::atomic<int> wrong{0};
    std::atomic<int> on_caller_thread{0};
    auto reader = [&](int t) {
      const std::thread::id self = std::this_thread::get_id();
      for (int i = 0; i < kReadsPerThread; ++i) {
        const int slot = t * kReadsPerThread + i;
        const int chunk = slot % kChunks;
        Status st = tier->read_chunk("obj", chunk, std::nullopt, [&, slot, chunk, self](auto r) {
          if (std::this_thread::get_id() == self) on_caller_thread.fetch_add(1);
          if (!r.is_ok() || r->data() != values[chunk]) wrong.fetch_add(1);
          calls[slot].fetch_add(1);
        });
        if (!st.is_ok()) wrong.fetch_add(1);
      }
    };
    std::thread a(reader, 0);
    std::thread b(reader, 1);
    a.join();
    b.join();
    tier.reset();  // waits for every read
    for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i].load(), 1) << i;
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_EQ(on_caller_thread.load(), 0);
  }
}

}  // namespace
}  // namespace tierkv::flash
