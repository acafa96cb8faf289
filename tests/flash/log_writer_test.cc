// LogWriter's contract, with an engine the test completes by hand: a
// region's header lands before the rest of the region is sent; at most
// max_write_inflight batches are in flight; a freed slot sends whatever has
// gathered (group commit); a failed header dooms its region's later batches
// and makes the next record open another region; fsync=always fsyncs a
// batch before it counts as landed; small records pack without crossing a
// block, and every batch is whole sectors at a sector boundary.
#include "flash/log_writer.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "flash/flash_index.h"
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
constexpr uint32_t kSector = 512;

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
    writer->start(engine, /*salt=*/7, kSector, [this](WriteBatch* b, int64_t result) {
      std::unique_ptr<WriteBatch> batch(b);
      std::lock_guard lock(mu);
      std::string bytes(batch->buffer.data(), batch->used);  // release_landed keeps the buffer
      writer->release_landed(*batch, result >= 0);
      std::vector<uint64_t> locations;
      for (const PendingChunk& c : batch->chunks) locations.push_back(c.location);
      landed.push_back(
          {batch->region, batch->region_offset, result, std::move(bytes), std::move(locations)});
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
    const std::string data(bytes, static_cast<char>('a' + next_key % 26));
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
    LogWriter::submit(engine, picked);
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
    std::string bytes;                // what the batch wrote
    std::vector<uint64_t> locations;  // of its records
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

TEST_F(LogWriterTest, SmallRecordsPackAndEveryBatchIsWholeSectors) {
  open(/*max_inflight=*/2);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 400; ++i) {
    // Mostly small records, some of a block or more; batches of a few
    // records go down as slots free (group commit), so many end mid-block.
    append(rng() % 8 == 0 ? 3000 + rng() % 6000 : 1 + rng() % 700);
    if (rng() % 3 == 0) kick_and_submit();
    if (!engine.held.empty() && rng() % 2 == 0) complete_next(0);
  }
  kick_and_submit();
  while (!engine.held.empty()) complete_next(0);
  std::lock_guard lock(mu);
  ASSERT_TRUE(writer->idle());
  uint64_t records = 0, packed_mid_block = 0;
  std::map<uint32_t, uint64_t> region_end;  // batches of a region go down in order, disjoint
  for (const Landing& b : landed) {
    ASSERT_GE(b.result, 0);
    EXPECT_EQ(b.offset % kSector, 0u);
    EXPECT_EQ(b.bytes.size() % kSector, 0u);
    EXPECT_GE(b.offset, region_end[b.region]);
    region_end[b.region] = b.offset + b.bytes.size();
    for (uint64_t loc : b.locations) {
      ++records;
      const uint64_t at = location::offset_bytes(loc);
      const uint64_t length = location::length_bytes(loc);
      EXPECT_EQ(at % kRecordAlign, 0u);
      if (length <= kBlockSize) {
        EXPECT_TRUE(location::packed(loc));
        EXPECT_LE(at % kBlockSize + length, kBlockSize) << "a small record crossed a block";
        if (at % kBlockSize != 0) ++packed_mid_block;
      } else {
        EXPECT_EQ(at % kBlockSize, 0u) << "a large record must start a block";
      }
      // The bytes at the location are the record, sealed for that place.
      ASSERT_GE(at, b.offset);
      const uint64_t skew = at - b.offset;
      Result<RecordView> r = decode_record(b.bytes.data() + skew, b.bytes.size() - skew,
                                           {7, region_offset(location::region(loc), kRegion) + at});
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      EXPECT_LE(record_length(r->key.size(), r->data.size()), length);
    }
  }
  EXPECT_EQ(records, 400u);
  EXPECT_GT(packed_mid_block, 200u);  // small records did share blocks
}

}  // namespace
}  // namespace tierkv::flash
