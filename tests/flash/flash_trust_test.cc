// The flash tier's part of the trust contract: what recovery brings back.
// Each test is one finding of the trust issue; each failed before its fix.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "flash/flash_tier.h"
#include "flash/io_engine.h"
#include "flash/record.h"
#include "tests/flash/flash_test_util.h"

namespace tierkv::flash {
namespace {

using testing::open_or_die;
using testing::pattern;
using testing::read_sync;
using testing::small_options;
using testing::TempDir;
using testing::write_sync;

struct File {
  explicit File(const std::string& path) : fd(::open(path.c_str(), O_RDWR)) {}
  ~File() { ::close(fd); }
  void write(uint64_t offset, const void* data, size_t n) const {
    ASSERT_EQ(::pwrite(fd, data, n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  }
  void read(uint64_t offset, void* data, size_t n) const {
    ASSERT_EQ(::pread(fd, data, n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  }
  int fd;
};

uint64_t region_offset(const FlashOptions& o, uint32_t region) {
  return kDataStart + uint64_t{region} * o.region_size;
}

// Stands between the tier and its engine: holds every write of a region's
// first block (its header) until released or failed, and forwards the rest,
// counting the writes, so that a test decides when a header lands instead
// of racing the device.
class HeaderGate final : public IoEngine {
 public:
  HeaderGate(std::unique_ptr<IoEngine> inner, uint64_t region_size)
      : inner_(std::move(inner)), region_size_(region_size) {}

  void submit(std::span<IoRequest* const> requests) override {
    std::vector<IoRequest*> now;
    {
      std::lock_guard lock(mu_);
      for (IoRequest* r : requests) {
        const bool header = r->op == IoRequest::Op::kWrite && r->offset >= kDataStart &&
                            (r->offset - kDataStart) % region_size_ == 0;
        if (header && armed_) {
          held_.push_back(r);
          continue;
        }
        if (r->op == IoRequest::Op::kWrite) ++writes_forwarded_;
        now.push_back(r);
      }
    }
    if (!now.empty()) inner_->submit(now);
  }
  std::string_view name() const override { return inner_->name(); }

  size_t held() {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  uint64_t writes_forwarded() {
    std::lock_guard lock(mu_);
    return writes_forwarded_;
  }
  // Lets the held headers go down, and every header after them.
  void release() {
    std::vector<IoRequest*> go = disarm();
    if (!go.empty()) inner_->submit(go);
  }
  // The held header writes fail as a device error would (EIO).
  void fail() {
    for (IoRequest* r : disarm()) r->on_complete(-EIO);
  }

 private:
  std::vector<IoRequest*> disarm() {
    std::lock_guard lock(mu_);
    armed_ = false;
    writes_forwarded_ += held_.size();
    return std::exchange(held_, {});
  }

  std::unique_ptr<IoEngine> inner_;
  const uint64_t region_size_;
  std::mutex mu_;
  bool armed_ = true;
  std::vector<IoRequest*> held_;
  uint64_t writes_forwarded_ = 0;
};

// Opens a tier whose engine is a HeaderGate; `gate` points at it while the
// tier lives.
std::unique_ptr<FlashTier> open_gated(FlashOptions o, HeaderGate*& gate) {
  o.wrap_engine = [&gate, region_size = o.region_size](std::unique_ptr<IoEngine> inner) {
    auto g = std::make_unique<HeaderGate>(std::move(inner), region_size);
    gate = g.get();
    return std::unique_ptr<IoEngine>(std::move(g));
  };
  return open_or_die(o);
}

// Releases what the gate holds however the test leaves its scope: the
// tier's destructor waits for every write, held ones too.
struct ReleaseAtExit {
  HeaderGate*& gate;
  ~ReleaseAtExit() {
    if (gate) gate->release();
  }
};

// A write whose outcome the test waits for (bounded).
struct PendingWrite {
  std::shared_ptr<std::promise<Status>> done = std::make_shared<std::promise<Status>>();
  std::future<Status> outcome = done->get_future();
  bool ran() { return outcome.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
  Status wait() {
    EXPECT_EQ(outcome.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    return outcome.get();
  }
};

PendingWrite start_write(FlashTier& t, const std::string& key, uint64_t version,
                         const std::string& data) {
  PendingWrite w;
  Status st = t.write_chunk({.key = key, .version = version, .data = data},
                            [done = w.done](Status s) { done->set_value(std::move(s)); });
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return w;
}

// Finding 4, fsync=always: a record is acknowledged only once the header of
// its region is on the device. The first record shares the header's batch;
// the second gathers in the next batch while the header is held, and must
// not go down (nor be acknowledged) before it: otherwise a crash right then
// leaves an acknowledged record in a region recovery does not know.
TEST(FlashTrustTest, NoBatchOfARegionGoesDownBeforeItsHeaderLands) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  o.fsync = FsyncPolicy::kAlways;
  HeaderGate* gate = nullptr;
  {
    auto t = open_gated(o, gate);
    ASSERT_TRUE(t);
    ReleaseAtExit release{gate};
    PendingWrite first = start_write(*t, "first", 1, pattern(8000, 1));
    ASSERT_EQ(gate->held(), 1u);
    PendingWrite second = start_write(*t, "second", 2, pattern(8000, 2));
    // Submission is synchronous (write_chunk kicks the queue), so a batch
    // sent down behind the held header would have been counted by now.
    EXPECT_EQ(gate->writes_forwarded(), 0u) << "a batch went down before its region's header";
    EXPECT_FALSE(second.ran()) << "acknowledged before its region's header landed";
    EXPECT_FALSE(first.ran());
    gate->release();
    EXPECT_TRUE(first.wait().is_ok());
    EXPECT_TRUE(second.wait().is_ok());
    EXPECT_EQ(gate->writes_forwarded(), 2u);
  }
  gate = nullptr;
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  EXPECT_EQ(*read_sync(*t, "first", 0), pattern(8000, 1));
  EXPECT_EQ(*read_sync(*t, "second", 0), pattern(8000, 2));
}

// Finding 4, the failed header: every record of that region fails with it
// (none is acknowledged, since recovery would never find it), and the next
// write goes to a fresh region whose header does land.
TEST(FlashTrustTest, FailedRegionHeaderFailsEveryRecordOfItsRegion) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  o.fsync = FsyncPolicy::kAlways;
  HeaderGate* gate = nullptr;
  {
    auto t = open_gated(o, gate);
    ASSERT_TRUE(t);
    ReleaseAtExit release{gate};
    PendingWrite first = start_write(*t, "first", 1, pattern(8000, 1));
    PendingWrite second = start_write(*t, "second", 2, pattern(8000, 2));
    ASSERT_EQ(gate->held(), 1u);
    gate->fail();
    EXPECT_EQ(first.wait().code(), StatusCode::kIOError);
    EXPECT_EQ(second.wait().code(), StatusCode::kIOError)
        << "acknowledged in a region whose header never reached the device";
    EXPECT_FALSE(t->lookup("first"));
    EXPECT_FALSE(t->lookup("second"));
    ASSERT_TRUE(write_sync(*t, {.key = "third", .version = 3, .data = pattern(8000, 3)}).is_ok());
  }
  gate = nullptr;
  // What was acknowledged is recovered; what failed is not.
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  EXPECT_EQ(*read_sync(*t, "third", 0), pattern(8000, 3));
  EXPECT_FALSE(t->lookup("first"));
  EXPECT_FALSE(t->lookup("second"));
}

// Finding 5: a crash in the middle of a multi-chunk overwrite must leave the
// previous, complete version, not reset the key to the partial new one.
TEST(FlashTrustTest, IncompleteNewerVersionKeepsThePreviousOne) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    for (uint32_t c = 0; c < 3; ++c) {
      ASSERT_TRUE(write_sync(*t, {.key = "obj",
                                  .chunk_index = c,
                                  .version = 7,
                                  .object_size = 3 * 4000,
                                  .chunk_count = 3,
                                  .data = pattern(4000, c)})
                      .is_ok());
    }
    // The overwrite gets two of its three chunks down, then "the crash".
    for (uint32_t c = 0; c < 2; ++c) {
      ASSERT_TRUE(write_sync(*t, {.key = "obj",
                                  .chunk_index = c,
                                  .version = 9,
                                  .object_size = 3 * 4000,
                                  .chunk_count = 3,
                                  .data = pattern(4000, 100 + c)})
                      .is_ok());
    }
  }
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  std::optional<FlashObjectInfo> info = t->lookup("obj");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->version, 7u);
  EXPECT_EQ(info->chunks, (std::vector<uint32_t>{0, 1, 2}));
  for (uint32_t c = 0; c < 3; ++c) EXPECT_EQ(*read_sync(*t, "obj", c), pattern(4000, c));
  EXPECT_EQ(t->recovery().objects_incomplete, 1u);
  // The leftovers' version is never handed out again.
  EXPECT_GE(t->recovered_max_version(), 9u);
}

// ... and once the newer version is complete, it wins, in whatever order
// its chunks were written.
TEST(FlashTrustTest, CompleteNewerVersionReplacesTheOldOne) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    for (uint32_t c = 0; c < 2; ++c) {
      ASSERT_TRUE(write_sync(*t, {.key = "obj",
                                  .chunk_index = c,
                                  .version = 7,
                                  .object_size = 8000,
                                  .chunk_count = 2,
                                  .data = pattern(4000, c)})
                      .is_ok());
    }
    for (uint32_t c : {1u, 0u}) {
      ASSERT_TRUE(write_sync(*t, {.key = "obj",
                                  .chunk_index = c,
                                  .version = 9,
                                  .object_size = 8000,
                                  .chunk_count = 2,
                                  .data = pattern(4000, 50 + c)})
                      .is_ok());
    }
  }
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->lookup("obj")->version, 9u);
  EXPECT_EQ(*read_sync(*t, "obj", 0), pattern(4000, 50));
  EXPECT_EQ(*read_sync(*t, "obj", 1), pattern(4000, 51));
  EXPECT_EQ(t->recovery().objects_incomplete, 0u);
}

// Finding 4: a region sequence number must never be handed out twice, even
// when the header that used it never reached the device. Else the region
// can be reopened under that seq, and records left from its lost
// incarnation, past the new fill, match the new header and come back.
TEST(FlashTrustTest, LostRegionHeaderNeverLetsOldRecordsBack) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  o.size = layout_size(4, o.region_size);
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    // Many records, so the region's fill reaches far past what comes later.
    for (int i = 0; i < 40; ++i) {
      ASSERT_TRUE(
          write_sync(*t,
                     {.key = "old" + std::to_string(i), .version = 1, .data = pattern(16000, i)})
              .is_ok());
    }
  }
  // Region 0's header is lost, as if it had never been written.
  {
    File f(dir.file("f"));
    const std::string zeros(kBlockSize, '\0');
    f.write(region_offset(o, 0), zeros.data(), zeros.size());
  }
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    for (int i = 0; i < 40; ++i) EXPECT_FALSE(t->lookup("old" + std::to_string(i)));
    // Reopening region 0 (the first free one) with a single small record.
    ASSERT_TRUE(write_sync(*t, {.key = "new", .version = 2, .data = "n"}).is_ok());
  }
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->lookup("new"));
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(t->lookup("old" + std::to_string(i))) << i;
}

// Finding 7: bytes a client stored as a value can never be parsed as a
// record, even where recovery resynchronises block by block after a
// damaged record. The value below carries, at every block boundary, a
// record image for key "forged" with the right magic, format and region
// seq, a huge version, and a checksum computed as anyone without the
// device's salt would: with the old format's unkeyed checksum.
TEST(FlashTrustTest, ValueBytesShapedLikeRecordsAreNeverRecovered) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  const std::string key = "carrier";
  // The value starts 64 + 7 bytes into its record; blocks start every 4 KiB.
  const size_t lead = kBlockSize - sizeof(RecordHeader) - key.size();
  std::string value(lead + 8 * kBlockSize, 'v');
  uint64_t seq = 0;
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    ASSERT_TRUE(write_sync(*t, {.key = "first", .version = 1, .data = "x"}).is_ok());
    File f(dir.file("f"));
    RegionHeader rh;
    f.read(region_offset(o, 0), &rh, sizeof(rh));
    seq = rh.seq;
    for (size_t b = 0; b < 8; ++b) {
      AlignedBuffer forged(kBlockSize);
      encode_record(forged.data(), "forged", "evil", {0, kMaxObjectVersion - 1, seq, 4}, {0, 0});
      RecordHeader h;
      std::memcpy(&h, forged.data(), sizeof(h));
      h.checksum = 0;
      XXH3_state_t* state = XXH3_createState();
      XXH3_64bits_reset(state);
      XXH3_64bits_update(state, &h, sizeof(h));
      XXH3_64bits_update(state, "forged", 6);
      XXH3_64bits_update(state, "evil", 4);
      h.checksum = XXH3_64bits_digest(state);
      XXH3_freeState(state);
      std::memcpy(forged.data(), &h, sizeof(h));
      value.replace(lead + b * kBlockSize, kBlockSize, forged.data(), kBlockSize);
    }
    ASSERT_TRUE(write_sync(*t, {.key = key, .version = 2, .data = value}).is_ok());
  }
  // Damage the carrier's header so the scan resyncs through its value.
  {
    File f(dir.file("f"));
    const uint64_t carrier = region_offset(o, 0) + 2 * kBlockSize;
    RecordHeader h;
    f.read(carrier, &h, sizeof(h));
    ASSERT_EQ(h.magic, kRecordMagic);
    h.object_size ^= 1;
    f.write(carrier, &h, sizeof(h));
  }
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->lookup("forged"));
  EXPECT_FALSE(t->lookup(key));  // damaged: dropped, never served
  EXPECT_TRUE(t->lookup("first"));
  EXPECT_LT(t->recovered_max_version(), 100u);
  EXPECT_GE(t->recovery().records_dropped, 1u);
}

}  // namespace
}  // namespace tierkv::flash
