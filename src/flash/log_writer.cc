#include "flash/log_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "flash/flash_index.h"
#include "flash/record.h"

namespace tierkv::flash {

static_assert(location::kPackUnit == kRecordAlign);

namespace {

// Where a record of `size` bytes appended at `offset` starts: there, unless
// it would cross a block boundary (then at the next block), so that a small
// record is read with one block and a large one starts a block.
uint64_t record_start(uint64_t offset, uint64_t size) {
  const uint64_t in_block = offset % kBlockSize;
  return in_block != 0 && in_block + size > kBlockSize ? align_up(offset) : offset;
}

}  // namespace

void WriteBatch::on_complete(int64_t result) {
  writer->on_batch_complete(this, result);
}

LogWriter::LogWriter(const Options& options, RegionManager& regions)
    : options_(options), regions_(regions) {}

void LogWriter::start(IoEngine& engine, uint64_t salt, uint32_t write_alignment, Landed landed) {
  engine_ = &engine;
  salt_ = salt;
  write_alignment_ = write_alignment;
  landed_ = std::move(landed);
}

bool LogWriter::has_room(uint64_t bytes) const {
  return active_region_ >= 0 && record_start(active_offset_, bytes) + bytes <= options_.region_size;
}

void LogWriter::start_region(uint32_t r, uint64_t seq) {
  seal();
  regions_.start_written(r, seq);
  regions_.add_fill(r, kBlockSize);
  pending_bytes_ += kBlockSize;
  active_region_ = r;
  active_ = new_batch(r, 0, kBlockSize);
  encode_region_header(active_->buffer.data(), r, seq, options_.region_size, salt_);
  active_->used = kBlockSize;
  active_offset_ = kBlockSize;
}

void LogWriter::append(PendingChunk chunk, std::string_view data) {
  const uint64_t size = record_size(chunk.key.size(), data.size());
  const auto region = static_cast<uint32_t>(active_region_);
  const uint64_t start = record_start(active_offset_, size);
  if (!active_ || active_->used + (start - active_offset_) + size > active_->capacity) {
    seal();
    active_ = new_batch(region, active_offset_,
                        record_start(active_offset_, size) - active_offset_ + size);
  }
  pad_active(record_start(active_offset_, size) - active_offset_);
  encode_record(active_->buffer.data() + active_->used, chunk.key, data,
                {chunk.chunk_index, chunk.version, regions_.state(region).seq, chunk.object_size,
                 chunk.record_flags, chunk.expire_at_ms, chunk.chunk_count},
                {salt_, region_offset(region, options_.region_size) + active_offset_});
  chunk.location =
      location::pack(region, active_offset_, record_length(chunk.key.size(), data.size()));
  chunk.data_bytes = data.size();
  active_->used += size;
  active_->chunks.push_back(std::move(chunk));
  active_offset_ += size;
  regions_.add_fill(region, size);
  pending_bytes_ += size;
}

std::unique_ptr<WriteBatch> LogWriter::new_batch(uint32_t region, uint64_t offset, uint64_t bytes) {
  auto batch = std::make_unique<WriteBatch>();
  batch->writer = this;
  batch->op = IoRequest::Op::kWrite;
  batch->region = region;
  batch->region_offset = offset;
  const uint64_t room = options_.region_size - offset;
  batch->capacity = std::min(std::max(options_.write_buffer_size, bytes), room);
  // A batch that fits a standard buffer gets one, even at a region's tail
  // where it may fill less of it: a spare buffer's pages are already
  // mapped, and a fresh one faults every page in as it fills.
  if (batch->capacity <= options_.write_buffer_size && !spare_buffers_.empty()) {
    batch->buffer = std::move(spare_buffers_.back());
    spare_buffers_.pop_back();
  } else {
    // Only the filled part is written, and records zero their own padding.
    batch->buffer = AlignedBuffer(std::max(batch->capacity, options_.write_buffer_size),
                                  AlignedBuffer::Uninitialized{});
  }
  ++regions_.state(region).pending_writes;
  return batch;
}

void LogWriter::pad_active(uint64_t bytes) {
  if (bytes == 0) return;
  std::memset(active_->buffer.data() + active_->used, 0, bytes);
  active_->used += bytes;
  active_offset_ += bytes;
  regions_.add_fill(active_->region, bytes);
  pending_bytes_ += bytes;
}

void LogWriter::seal() {
  if (!active_) return;
  pad_active(align_up(active_->used, write_alignment_) - active_->used);
  sealed_.push_back(std::move(active_));
}

void LogWriter::kick(std::vector<IoRequest*>& to_submit) {
  while (writes_in_flight_ < options_.max_write_inflight) {
    WriteBatch* next = !sealed_.empty() ? sealed_.front().get() : active_.get();
    if (next == nullptr) break;
    const RegionState& region = regions_.state(next->region);
    // In order: nothing of a region goes down before its header has landed.
    if (!next->carries_header() && !region.header_landed && !region.header_failed) break;
    std::unique_ptr<WriteBatch> batch;
    if (!sealed_.empty()) {
      batch = std::move(sealed_.front());
      sealed_.pop_front();
    } else {
      seal();  // group commit: whatever has gathered
      batch = std::move(sealed_.front());
      sealed_.pop_front();
    }
    batch->doomed = !batch->carries_header() && region.header_failed;
    batch->buf = batch->buffer.data();
    batch->length = batch->used;
    batch->offset = region_offset(batch->region, options_.region_size) + batch->region_offset;
    batch->done = 0;
    ++writes_in_flight_;
    to_submit.push_back(batch.release());
  }
}

void LogWriter::submit(IoEngine& engine, std::vector<IoRequest*>& batches) {
  for (IoRequest* r : batches) {
    auto* batch = static_cast<WriteBatch*>(r);
    // Doomed batches still go through the engine (as a cheap fsync) so that
    // their callbacks run on an I/O thread, never inside the caller's locks.
    if (batch->doomed) {
      batch->op = IoRequest::Op::kFsync;
      batch->fsynced = true;
    }
  }
  if (!batches.empty()) engine.submit(batches);
  batches.clear();
}

void LogWriter::on_batch_complete(WriteBatch* batch, int64_t result) {
  if (batch->doomed) result = -EIO;
  if (result >= 0 && options_.fsync_always && !batch->fsynced) {
    batch->fsynced = true;
    batch->op = IoRequest::Op::kFsync;
    IoRequest* again = batch;
    engine_->submit(std::span(&again, 1));
    return;
  }
  landed_(batch, result);
}

void LogWriter::release_landed(WriteBatch& batch, bool ok) {
  --writes_in_flight_;
  ++writes_finishing_;
  RegionState& region = regions_.state(batch.region);
  --region.pending_writes;
  if (batch.carries_header()) {
    region.header_landed = ok;
    region.header_failed = !ok;
    // Later records must go to a region whose header is on the device.
    if (!ok && active_region_ == static_cast<int64_t>(batch.region)) active_region_ = -1;
  }
  pending_bytes_ -= batch.used;
  // Spares for a burst (a reclaim round's copies on top of the writers'
  // batches), not only for the batches in flight: a buffer freed here is
  // mapped again, page by page, by the next batch past the spares.
  if (batch.buffer.size() == options_.write_buffer_size &&
      spare_buffers_.size() < 2 * size_t{options_.max_write_inflight}) {
    spare_buffers_.push_back(std::move(batch.buffer));
  }
}

void LogWriter::finish_callbacks() {
  if (--writes_finishing_ == 0 && writes_in_flight_ == 0) changed_.notify_all();
}

void LogWriter::forget_active_region() {
  active_region_ = -1;
  active_offset_ = 0;
}

bool LogWriter::idle() const {
  return writes_in_flight_ == 0 && writes_finishing_ == 0 && sealed_.empty() && !active_;
}

}  // namespace tierkv::flash
