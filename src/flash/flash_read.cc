// FlashTier's read path: lookup, queued submission, verification (inline or
// on the verifier threads) and the callback. Writes: flash_tier.cc.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/hash.h"
#include "flash/flash_tier.h"
#include "flash/flash_tier_internal.h"
#include "flash/record.h"

namespace tierkv::flash {

// Reads at least this long are verified on a verifier thread (with io_uring)
// while other reads are in flight. Measured: at 64 KiB the hand-off (a
// wake-up, ~10-30 us on a busy machine) costs more than the hash (~4 us);
// alone in flight (QD1), a read gains nothing from it either.
constexpr uint64_t kOffloadVerifyBytes = 256 * 1024;
constexpr unsigned kVerifierThreads = 2;

Status FlashTier::read_chunk(std::string_view key, uint32_t chunk_index,
                             std::optional<uint64_t> version, ReadCallback done) {
  ReadOp* op = make_read_op(key, chunk_index, version);
  if (op == nullptr) return Status::not_found("chunk not on flash");
  op->done = std::move(done);
  submit_reads(std::span(&op, 1));
  return Status::ok();
}

void FlashTier::read_chunks(std::string_view key, std::span<const uint32_t> chunk_indexes,
                            std::optional<uint64_t> version, ChunkReadCallback done,
                            const VersionLocations* known, ReadPriority priority) {
  std::vector<ReadOp*> ops;
  for (uint32_t index : chunk_indexes) {
    ReadOp* op = make_read_op(key, index, version, known);
    if (op == nullptr) {
      done(index, Status::not_found("chunk not on flash"));
      continue;
    }
    op->done = [done, index](Result<FlashChunk> r) { done(index, std::move(r)); };
    op->priority = priority;
    ops.push_back(op);
  }
  if (!ops.empty()) submit_reads(ops);
}

std::optional<FlashTier::VersionLocations> FlashTier::locate_version(std::string_view key,
                                                                     uint64_t version,
                                                                     Pinning pinning) const {
  Impl& im = *impl_;
  const uint64_t key_hash = hash64(key);
  VersionLocations out;
  // See reclaim_locked(): the lookup and the pins are one step for it.
  std::unique_lock pins(im.pin_mu, std::defer_lock);
  if (pinning == Pinning::kPin) pins.lock();
  // Taken before the lookup, as for a read (see reclaim_locked()).
  out.reclaim_epoch = im.reclaim_epoch.load(std::memory_order_acquire);
  if (!im.index.version_locations(key, key_hash, version, &out.locations, &out.expire_at_ms))
    return std::nullopt;
  out.version = version;
  if (pinning == Pinning::kNone) return out;
  std::vector<uint32_t>& regions = out.pins.regions_;
  for (uint64_t where : out.locations) {
    if (where == 0) continue;
    const uint32_t region = location::region(where);
    if (std::find(regions.begin(), regions.end(), region) != regions.end()) continue;
    regions.push_back(region);
    ++im.region_readers[region];
  }
  out.pins.tier_ = this;
  return out;
}

FlashTier::RegionPins::RegionPins(RegionPins&& other) noexcept
    : tier_(std::exchange(other.tier_, nullptr)), regions_(std::move(other.regions_)) {
  other.regions_.clear();
}

FlashTier::RegionPins& FlashTier::RegionPins::operator=(RegionPins&& other) noexcept {
  if (this != &other) {
    reset();
    tier_ = std::exchange(other.tier_, nullptr);
    regions_ = std::move(other.regions_);
    other.regions_.clear();
  }
  return *this;
}

void FlashTier::RegionPins::reset() {
  if (tier_ != nullptr && !regions_.empty()) tier_->unpin_regions(regions_);
  tier_ = nullptr;
  regions_.clear();
}

FlashTier::ReadOp* FlashTier::make_read_op(std::string_view key, uint32_t chunk_index,
                                           std::optional<uint64_t> version,
                                           const VersionLocations* known) {
  Impl& im = *impl_;
  const uint64_t key_hash = hash64(key);
  // Taken before the lookup: see reclaim_locked().
  const uint64_t epoch = im.reclaim_epoch.load(std::memory_order_acquire);
  auto found = im.index.lookup(key, key_hash, chunk_index, version, options_.reinsertion);
  if (!found && known != nullptr && (!version || known->version == *version) &&
      chunk_index < known->locations.size() && known->locations[chunk_index] != 0) {
    // Replaced in the index since `known` was taken: its record, if its
    // region was not reclaimed since, is still this version's chunk.
    const IndexedChunk then{known->locations[chunk_index], known->version, 0, known->expire_at_ms};
    return make_read_op_at(key, key_hash, chunk_index, then, known->reclaim_epoch);
  }
  if (!found) {
    im.metrics.read_misses.add();
    return nullptr;
  }
  return make_read_op_at(key, key_hash, chunk_index, *found, epoch);
}

FlashTier::ReadOp* FlashTier::make_read_op_at(std::string_view key, uint64_t key_hash,
                                              uint32_t chunk_index, const IndexedChunk& found,
                                              uint64_t epoch) {
  auto op = std::make_unique<ReadOp>();
  op->tier = this;
  op->key.assign(key);
  op->key_hash = key_hash;
  op->chunk_index = chunk_index;
  op->version = found.version;
  op->location = found.location;
  op->reclaim_epoch = epoch;
  op->expire_at_ms = found.expire_at_ms;
  op->start_ns = mono_ns();
  const uint64_t size = read_length(found.location);
  op->buffer = options_.buffer_pool != nullptr
                   ? options_.buffer_pool->take(size)
                   : AlignedBuffer(size, AlignedBuffer::Uninitialized{});
  op->op = IoRequest::Op::kRead;
  op->buf = op->buffer.data();
  op->length = size;
  op->offset = region_start(location::region(found.location)) +
               location::offset_blocks(found.location) * kBlockSize;
  return op.release();
}

void FlashTier::submit_reads(std::span<ReadOp* const> ops) {
  Impl& im = *impl_;
  std::vector<IoRequest*> now;
  {
    std::lock_guard lock(im.read_mu);
    im.reads_outstanding += ops.size();
    for (ReadOp* op : ops) {
      (op->priority == ReadPriority::kDemand ? im.read_queue : im.background_queue).push_back(op);
    }
    take_queued_reads_locked(now);
  }
  if (!now.empty()) im.engine->submit(now);
}

void FlashTier::take_queued_reads_locked(std::vector<IoRequest*>& out) {
  Impl& im = *impl_;
  const uint32_t background_cap = std::max<uint32_t>(options_.queue_depth / 2, 1);
  while (im.reads_in_flight < options_.queue_depth) {
    ReadOp* op = nullptr;
    if (!im.read_queue.empty()) {
      op = im.read_queue.front();
      im.read_queue.pop_front();
    } else if (!im.background_queue.empty() && im.background_in_flight < background_cap) {
      op = im.background_queue.front();
      im.background_queue.pop_front();
      ++im.background_in_flight;
    } else {
      break;
    }
    ++im.reads_in_flight;
    out.push_back(op);
  }
}

void FlashTier::on_read_done(ReadOp* raw, int64_t result) {
  Impl& im = *impl_;
  std::unique_ptr<ReadOp> op(raw);
  std::vector<IoRequest*> next;  // keep the device busy before the callback
  bool others_in_flight = false;
  {
    std::lock_guard lock(im.read_mu);
    --im.reads_in_flight;
    if (op->priority == ReadPriority::kBackground) --im.background_in_flight;
    take_queued_reads_locked(next);
    others_in_flight = im.reads_in_flight > 0;
  }
  if (!next.empty()) im.engine->submit(next);
  const bool background = op->priority == ReadPriority::kBackground;
  if (im.offload_verify &&
      (background || (others_in_flight && op->length >= kOffloadVerifyBytes))) {
    {
      std::lock_guard lock(im.verify_mu);
      (background ? im.verify_background_queue : im.verify_queue)
          .emplace_back(op.release(), result);
    }
    im.verify_cv.notify_one();
    return;
  }
  complete_read(op.release(), result);
}

void FlashTier::wait_reads_idle() {
  Impl& im = *impl_;
  std::unique_lock lock(im.read_mu);
  im.reads_idle.wait(lock, [&] { return im.reads_outstanding == 0; });
}

void FlashTier::complete_read(ReadOp* raw, int64_t result) {
  Impl& im = *impl_;
  std::unique_ptr<ReadOp> op(raw);
  Result<FlashChunk> chunk = finish_read(*op, result);
  im.metrics.read_latency.record(mono_ns() - op->start_ns);
  op->done(std::move(chunk));
  op.reset();
  std::lock_guard lock(im.read_mu);
  if (--im.reads_outstanding == 0) im.reads_idle.notify_all();
}

// The record's length rounded up to what the device accepts, never past its
// 4 KiB extent; buffered I/O reads the length as recorded (512-byte units).
uint64_t FlashTier::read_length(uint64_t location) const {
  const uint64_t length = location::length_bytes(location);
  return std::min(align_up(length, io_alignment_), location::extent_bytes(location));
}

void FlashTier::start_verifiers() {
  Impl& im = *impl_;
  // The thread-pool engine already completes reads on many threads.
  if (im.engine->name() != "io_uring") return;
  im.offload_verify = true;
  for (unsigned i = 0; i < kVerifierThreads; ++i) {
    im.verifiers.emplace_back([this, &im] {
      std::unique_lock lock(im.verify_mu);
      while (true) {
        im.verify_cv.wait(lock, [&] {
          return im.verify_stop || !im.verify_queue.empty() || !im.verify_background_queue.empty();
        });
        auto& queue = im.verify_queue.empty() ? im.verify_background_queue : im.verify_queue;
        if (queue.empty()) return;  // stopping, and nothing left
        auto [op, result] = queue.front();
        queue.pop_front();
        lock.unlock();
        complete_read(op, result);
        lock.lock();
      }
    });
  }
}

void FlashTier::stop_verifiers() {
  Impl& im = *impl_;
  {
    std::lock_guard lock(im.verify_mu);
    im.verify_stop = true;
  }
  im.verify_cv.notify_all();
  for (std::thread& t : im.verifiers) t.join();
  im.verifiers.clear();
}

Result<FlashChunk> FlashTier::finish_read(ReadOp& op, int64_t result) {
  Impl& im = *impl_;
  im.metrics.reads.add();
  if (result < 0) {
    im.metrics.read_errors.add();
    spdlog::error("flash: read at offset {} failed: {}", op.offset,
                  std::strerror(static_cast<int>(-result)));
    return Status::io_error(std::string("flash read: ") + std::strerror(static_cast<int>(-result)));
  }
  Result<RecordView> rec = decode_record(op.buffer.data(), op.length, {salt(), op.offset});
  const bool matches = rec.is_ok() && rec->key == op.key &&
                       rec->header.chunk_index == op.chunk_index &&
                       rec->header.object_version == op.version;
  if (!matches) {
    if (im.reclaim_epoch.load(std::memory_order_acquire) != op.reclaim_epoch) {
      im.metrics.read_races.add();
      return Status::not_found("flash region reclaimed during the read");
    }
    im.metrics.checksum_failures.add();
    spdlog::warn("flash: record for chunk {} of a {}-byte key at offset {} failed verification: {}",
                 op.chunk_index, op.key.size(), op.offset,
                 rec.is_ok() ? "identity mismatch" : rec.status().message());
    im.index.drop_chunk(op.key, op.key_hash, op.chunk_index, op.location);
    return Status::not_found("flash record failed verification");
  }
  im.metrics.read_bytes.add(rec->data.size());
  const auto data_offset = static_cast<uint32_t>(rec->data.data() - op.buffer.data());
  const auto data_length = static_cast<uint32_t>(rec->data.size());
  const uint64_t object_size = rec->header.object_size;
  return FlashChunk(std::move(op.buffer), data_offset, data_length, op.chunk_index, op.version,
                    object_size, op.expire_at_ms);
}

}  // namespace tierkv::flash
