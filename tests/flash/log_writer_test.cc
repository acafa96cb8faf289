// LogWriter's contract, with an engine the test completes by hand: a
// region's header lands before the rest of the region is sent; at most
// max_write_inflight batches are in flight; a freed slot sends whatever has
// gathered (group commit); a failed header dooms its region's later batches
// and makes the next record open another region; fsync=always fsyncs a
// batch before it counts as landed.
#include "flash/log_writer.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <mutex>
#include <vector>

#include "flash/record.h"

namespace tierkv::flash {
namespace {

// Holds what is submitted until the test completes it.
class ManualEngine final : public IoEngine {
 public:
  void submit(std::span<IoRequest* const> requests) override {
    for (IoRequest* r : requests) held.push_back(r);
  }
  std::string_view name() const override { return "manual"; }
  std::vector<IoRequest*> held;
};

constexpr uint64_t kRegion = 64 * kBlockSize;

class LogWriterTest : public ::testing::Test {
 protected:
  void open(uint32_t max_inflight, bool fsync_always = false) {
    regions.reset(4);
    regions.finish_restore();
    writer = std::make_unique<LogWriter>(LogWriter::Options{.region_size = kRegion,
                                                            .write_buffer_size = 4 * kBlockSize,
                                                            .max_write_inflight = max_inflight,
                                                            .fsync_always = fsync_always},
                                         regions);
    writer->start(engine, /*salt=*/7, [this](WriteBatch* b, int64_t result) {
      std::unique_ptr<WriteBatch> batch(b);
      std::lock_guard lock(mu);
      writer->release_landed(*batch, result >= 0);
      landed.push_back({batch->region, batch->region_offset, result});
      writer->finish_callbacks();
    });
  }
  // Lands whatever a test left in flight: the batches are the writer's to free.
  void TearDown() override {
    while (!engine.held.empty()) complete_next(0);
  }
  // Appends one record of `bytes` of data, opening a region when needed.
  void append(uint64_t bytes) {
    std::lock_guard lock(mu);
    PendingChunk c;
    c.key = "k" + std::to_string(next_key++);
    c.version = 1;
    const std::string data(bytes, 'x');
    if (!writer->has_room(record_size(c.key.size(), data.size())))
      writer->start_region(*regions.take_free(), ++seq);
    writer->append(std::move(c), data);
  }
  void kick_and_submit() {
    std::vector<IoRequest*> picked;
    {
      std::lock_guard lock(mu);
      writer->kick(picked);
    }
    writer->submit(picked);
  }
  // Completes the oldest held request with `result`, then sends what that freed.
  IoRequest* complete_next(int64_t result) {
    IoRequest* r = engine.held.front();
    engine.held.erase(engine.held.begin());
    r->on_complete(result < 0 ? result : static_cast<int64_t>(r->length));
    kick_and_submit();
    return r;
  }
  struct Landing {
    uint32_t region;
    uint64_t offset;
    int64_t result;
  };
  std::mutex mu;  // the owner's write lock
  MetricsRegistry registry;
  RegionManager regions{registry.gauge("test_draining", "draining")};
  ManualEngine engine;
  std::unique_ptr<LogWriter> writer;
  std::vector<Landing> landed;
  uint64_t seq = 0;
  int next_key = 0;
};

TEST_F(LogWriterTest, TheHeaderLandsBeforeTheRestOfItsRegion) {
  open(/*max_inflight=*/4);
  for (int i = 0; i < 6; ++i) append(3000);  // several batches of one region
  kick_and_submit();
  ASSERT_EQ(engine.held.size(), 1u);  // the header alone
  EXPECT_EQ(static_cast<WriteBatch*>(engine.held[0])->region_offset, 0u);
  complete_next(0);
  EXPECT_FALSE(engine.held.empty());  // now the rest goes
  for (IoRequest* r : engine.held) EXPECT_GT(static_cast<WriteBatch*>(r)->region_offset, 0u);
  while (!engine.held.empty()) complete_next(0);
  std::lock_guard lock(mu);
  EXPECT_TRUE(writer->idle());
  EXPECT_EQ(writer->pending_bytes(), 0u);
  EXPECT_EQ(regions.state(landed[0].region).pending_writes, 0u);
}

TEST_F(LogWriterTest, InFlightIsBoundedAndAFreedSlotSendsWhatGathered) {
  open(/*max_inflight=*/1);
  append(100);  // rides in the header's batch
  kick_and_submit();
  complete_next(0);
  ASSERT_TRUE(engine.held.empty());
  append(100);
  kick_and_submit();
  ASSERT_EQ(engine.held.size(), 1u);
  append(100);
  append(100);
  kick_and_submit();
  EXPECT_EQ(engine.held.size(), 1u);  // the slot is taken: they gather
  complete_next(0);
  ASSERT_EQ(engine.held.size(), 1u);  // both records in one batch
  EXPECT_EQ(static_cast<WriteBatch*>(engine.held[0])->chunks.size(), 2u);
  complete_next(0);
  std::lock_guard lock(mu);
  EXPECT_TRUE(writer->idle());
}

TEST_F(LogWriterTest, AFailedHeaderDoomsItsRegionAndTheNextRecordOpensAnother) {
  open(/*max_inflight=*/4);
  append(100);
  append(20000);  // a batch of its own, in the same region
  kick_and_submit();
  const uint32_t first = static_cast<WriteBatch*>(engine.held[0])->region;
  complete_next(-EIO);
  ASSERT_FALSE(engine.held.empty());
  auto* doomed = static_cast<WriteBatch*>(engine.held[0]);
  EXPECT_TRUE(doomed->doomed);
  EXPECT_EQ(doomed->op, IoRequest::Op::kFsync);  // sent unwritten, to complete off-lock
  complete_next(0);
  EXPECT_LT(landed.back().result, 0);  // failed despite the engine's success
  EXPECT_TRUE(regions.state(first).header_failed);
  {
    std::lock_guard lock(mu);
    EXPECT_FALSE(writer->has_room(kBlockSize));
  }
  append(100);
  kick_and_submit();
  EXPECT_NE(static_cast<WriteBatch*>(engine.held.back())->region, first);
}

TEST_F(LogWriterTest, FsyncAlwaysFsyncsBeforeTheBatchCountsAsLanded) {
  open(/*max_inflight=*/4, /*fsync_always=*/true);
  append(100);
  kick_and_submit();
  IoRequest* header = engine.held[0];
  EXPECT_EQ(header->op, IoRequest::Op::kWrite);
  complete_next(0);
  EXPECT_TRUE(landed.empty());
  ASSERT_FALSE(engine.held.empty());
  EXPECT_EQ(engine.held[0], header);  // the same batch, again, as an fsync
  EXPECT_EQ(header->op, IoRequest::Op::kFsync);
  complete_next(0);
  ASSERT_EQ(landed.size(), 1u);
  EXPECT_EQ(landed[0].offset, 0u);
}

}  // namespace
}  // namespace tierkv::flash
