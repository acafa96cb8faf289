// FlashTier's write path: batches, group commit, landing and indexing, flush and stats. Reads:
// flash_read.cc; opening and recovery: flash_open.cc.
#include "flash/flash_tier.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/hash.h"
#include "flash/flash_tier_internal.h"
#include "flash/record.h"

namespace tierkv::flash {

void FlashTier::WriteBatch::on_complete(int64_t result) {
  tier->on_write_done(this, result);
}
// ---------------------------------------------------------------- writes

Status FlashTier::write_chunk(const ChunkWrite& chunk, WriteCallback done) {
  std::vector<WriteCallback> callbacks;
  callbacks.push_back(std::move(done));
  return enqueue_writes(std::span(&chunk, 1), std::move(callbacks));
}

Status FlashTier::write_chunks(std::span<const ChunkWrite> chunks, WriteCallback done) {
  if (chunks.empty()) {
    done(Status::ok());
    return Status::ok();
  }
  struct Join {
    std::mutex mu;
    size_t remaining;
    Status first_error;
    WriteCallback done;
  };
  auto join = std::make_shared<Join>();
  join->remaining = chunks.size();
  join->done = std::move(done);
  std::vector<WriteCallback> callbacks;
  for (size_t i = 0; i < chunks.size(); ++i) {
    callbacks.push_back([join](Status st) {
      std::unique_lock lock(join->mu);
      if (!st.is_ok() && join->first_error.is_ok()) join->first_error = std::move(st);
      if (--join->remaining > 0) return;
      Status result = std::move(join->first_error);
      lock.unlock();
      join->done(std::move(result));
    });
  }
  Status st = enqueue_writes(chunks, std::move(callbacks));
  if (!st.is_ok()) {
    // Chunks queued before the failure still land; the caller hears only
    // this error, so the joined callback must not run.
    std::lock_guard lock(join->mu);
    join->done = [](Status) {};
  }
  return st;
}

Status FlashTier::enqueue_writes(std::span<const ChunkWrite> chunks,
                                 std::vector<WriteCallback> done,
                                 const std::shared_ptr<StagingEntry>& staging) {
  const uint64_t max_record = options_.region_size - kBlockSize;
  uint64_t total = 0;
  for (const ChunkWrite& c : chunks) {
    const uint64_t size = record_size(c.key.size(), c.data.size());
    if (c.key.empty()) return Status::invalid_argument("flash: empty key");
    if (size > max_record ||
        record_length(c.key.size(), c.data.size()) > location::kMaxRecordBytes) {
      return Status::too_large("flash: chunk record of " + std::to_string(size) +
                               " bytes exceeds the region payload of " +
                               std::to_string(max_record));
    }
    total += size;
  }
  Impl& im = *impl_;
  std::vector<IoRequest*> to_submit;
  Status st;
  {
    std::lock_guard lock(im.write_mu);
    if (im.clearing) return Status::busy("flash is being cleared");
    if (im.pending_bytes > 0 && im.pending_bytes + total > options_.max_pending_write_bytes) {
      return Status::busy("flash write queue full");
    }
    size_t appended = 0;
    for (; appended < chunks.size(); ++appended) {
      const ChunkWrite& c = chunks[appended];
      PendingChunk p;
      p.key.assign(c.key);
      p.key_hash = hash64(c.key);
      p.chunk_index = c.chunk_index;
      p.version = c.version;
      p.object_size = c.object_size;
      p.chunk_count = c.chunk_count;
      p.expire_at_ms = c.expire_at_ms;
      p.generation = im.generation;
      p.staging = staging;
      p.done = std::move(done[appended]);
      st = append_locked(std::move(p), c.data);
      if (!st.is_ok()) break;
    }
    {
      // Before write_mu is released, so before any of them can land.
      std::lock_guard landing(im.landing_mu);
      for (size_t i = 0; i < appended; ++i) ++im.in_flight[hash64(chunks[i].key)].writes;
    }
    kick_locked(to_submit);
  }
  submit_writes(to_submit);
  return st;
}

Status FlashTier::append_locked(PendingChunk chunk, std::string_view data) {
  Impl& im = *impl_;
  TIERKV_RETURN_IF_ERROR(drop_snapshot_locked());
  const uint64_t size = record_size(chunk.key.size(), data.size());
  if (chunk.version > im.max_version_seen.load(std::memory_order_relaxed))
    im.max_version_seen.store(chunk.version, std::memory_order_relaxed);
  if (im.active_region < 0 || im.active_offset + size > options_.region_size) {
    TIERKV_RETURN_IF_ERROR(open_region_locked());
  }
  const auto region = static_cast<uint32_t>(im.active_region);
  RegionState& st = im.regions[region];
  if (!im.active || im.active->used + size > im.active->buffer.size()) {
    seal_locked();
    im.active = new_batch_locked(region, im.active_offset, size);
  }
  encode_record(im.active->buffer.data() + im.active->used, chunk.key, data,
                {chunk.chunk_index, chunk.version, st.seq, chunk.object_size, chunk.record_flags,
                 chunk.expire_at_ms, chunk.chunk_count},
                {salt(), region_start(region) + im.active_offset});
  chunk.location = location::pack(region, im.active_offset / kBlockSize,
                                  record_length(chunk.key.size(), data.size()));
  chunk.data_bytes = data.size();
  im.active->used += size;
  im.active->chunks.push_back(std::move(chunk));
  im.active_offset += size;
  st.fill += size;
  im.used_bytes += size;
  im.pending_bytes += size;
  update_space_gauges_locked();
  return Status::ok();
}

Status FlashTier::open_region_locked() {
  Impl& im = *impl_;
  // Before anything changes: a failure here leaves the tier as it was.
  Result<uint64_t> seq = impl_->super->take_seq();
  if (!seq.is_ok()) return seq.status();
  uint32_t region = 0;
  if (!im.free_regions.empty()) {
    region = im.free_regions.front();
    im.free_regions.pop_front();
  } else {
    // The background reclaimer (reinsertion) fell behind: reclaim the oldest
    // region here, without reinsertion, which would read the device. One
    // that reads still pin drains; the next oldest goes too.
    while (true) {
      if (im.fifo.empty()) return Status::busy("flash: every region is being reclaimed or read");
      region = im.fifo.front();
      if (im.regions[region].pending_writes > 0) {
        return Status::busy("flash: oldest region still has writes in flight");
      }
      im.fifo.pop_front();
      if (reclaim_locked(region, nullptr)) break;
    }
  }
  seal_locked();
  RegionState& st = im.regions[region];
  st = RegionState{};
  st.seq = *seq;
  st.fill = kBlockSize;
  im.used_bytes += kBlockSize;
  im.pending_bytes += kBlockSize;
  im.fifo.push_back(region);
  im.active_region = region;
  im.active = new_batch_locked(region, 0, kBlockSize);
  encode_region_header(im.active->buffer.data(), region, st.seq, options_.region_size, salt());
  im.active->used = kBlockSize;
  im.active_offset = kBlockSize;
  update_space_gauges_locked();
  if (options_.reinsertion && reclaim_wanted_locked()) im.reclaim_cv.notify_one();
  return Status::ok();
}

std::unique_ptr<FlashTier::WriteBatch> FlashTier::new_batch_locked(uint32_t region, uint64_t offset,
                                                                   uint64_t bytes) {
  Impl& im = *impl_;
  auto batch = std::make_unique<WriteBatch>();
  batch->tier = this;
  batch->op = IoRequest::Op::kWrite;
  batch->region = region;
  batch->region_offset = offset;
  const uint64_t room = options_.region_size - offset;
  const uint64_t capacity = std::min(std::max(options_.write_buffer_size, bytes), room);
  if (capacity == options_.write_buffer_size && !im.spare_buffers.empty()) {
    batch->buffer = std::move(im.spare_buffers.back());
    im.spare_buffers.pop_back();
  } else {
    // Only the filled part is written, and records zero their own padding.
    batch->buffer = AlignedBuffer(capacity, AlignedBuffer::Uninitialized{});
  }
  ++im.regions[region].pending_writes;
  return batch;
}

void FlashTier::seal_locked() {
  Impl& im = *impl_;
  if (im.active) im.sealed.push_back(std::move(im.active));
}

void FlashTier::kick_locked(std::vector<IoRequest*>& to_submit) {
  Impl& im = *impl_;
  while (im.writes_in_flight < options_.max_write_inflight) {
    WriteBatch* next = !im.sealed.empty() ? im.sealed.front().get() : im.active.get();
    if (next == nullptr) break;
    const RegionState& region = im.regions[next->region];
    // In order: nothing of a region goes down before its header has landed.
    if (!next->carries_header() && !region.header_landed && !region.header_failed) break;
    std::unique_ptr<WriteBatch> batch;
    if (!im.sealed.empty()) {
      batch = std::move(im.sealed.front());
      im.sealed.pop_front();
    } else {
      batch = std::move(im.active);  // group commit: whatever has gathered
    }
    batch->doomed = !batch->carries_header() && region.header_failed;
    batch->buf = batch->buffer.data();
    batch->length = batch->used;
    batch->offset = region_start(batch->region) + batch->region_offset;
    batch->done = 0;
    ++im.writes_in_flight;
    to_submit.push_back(batch.release());
  }
}

void FlashTier::submit_writes(std::vector<IoRequest*>& batches) {
  for (IoRequest* r : batches) {
    auto* batch = static_cast<WriteBatch*>(r);
    // Doomed batches still go through the engine (as a cheap fsync) so that
    // their callbacks run on an I/O thread, never inside the caller's locks.
    if (batch->doomed) {
      batch->op = IoRequest::Op::kFsync;
      batch->fsynced = true;
    }
  }
  if (!batches.empty()) impl_->engine->submit(batches);
  batches.clear();
}

void FlashTier::on_write_done(WriteBatch* raw, int64_t result) {
  Impl& im = *impl_;
  if (raw->doomed) result = -EIO;
  if (result >= 0 && options_.fsync == FsyncPolicy::kAlways && !raw->fsynced) {
    raw->fsynced = true;
    raw->op = IoRequest::Op::kFsync;
    im.engine->submit(raw);
    return;
  }
  std::unique_ptr<WriteBatch> batch(raw);
  const bool ok = result >= 0;
  if (ok && batch->fsynced) im.metrics.fsyncs.add();
  std::vector<Status> outcomes(batch->chunks.size());
  if (!ok) {
    const Status failed =
        Status::io_error(std::string("flash write: ") + std::strerror(static_cast<int>(-result)));
    for (Status& outcome : outcomes) outcome = failed;
  }
  uint64_t user_bytes = 0;
  // Index before releasing the region: once pending_writes drops, the region
  // may be reclaimed, and its entries must already be there to be dropped.
  index_landed(*batch, outcomes, user_bytes);
  if (ok) {
    im.metrics.device_write_bytes.add(batch->used);
    im.metrics.user_write_bytes.add(user_bytes);
    im.device_sync.mark_dirty();
  } else {
    im.metrics.write_errors.add();
    log_write_error(*batch, result);
  }
  std::vector<IoRequest*> next;
  {
    std::lock_guard lock(im.write_mu);
    --im.writes_in_flight;
    ++im.writes_finishing;
    RegionState& region = im.regions[batch->region];
    --region.pending_writes;
    if (batch->carries_header()) {
      region.header_landed = ok;
      region.header_failed = !ok;
      // Later records must go to a region whose header is on the device.
      if (!ok && im.active_region == static_cast<int64_t>(batch->region)) im.active_region = -1;
    }
    im.pending_bytes -= batch->used;
    if (!im.deferred_meta.empty() && !im.clearing) append_deferred_meta_locked();
    kick_locked(next);
    if (batch->buffer.size() == options_.write_buffer_size &&
        im.spare_buffers.size() < options_.max_write_inflight) {
      im.spare_buffers.push_back(std::move(batch->buffer));
    }
  }
  submit_writes(next);
  update_index_gauges();
  for (size_t i = 0; i < batch->chunks.size(); ++i) {
    if (batch->chunks[i].done) batch->chunks[i].done(std::move(outcomes[i]));
  }
  // flush() returns only after the callbacks of what it waited for have run.
  std::lock_guard lock(im.write_mu);
  if (--im.writes_finishing == 0 && im.writes_in_flight == 0) im.writes_idle.notify_all();
}

// `outcomes` arrive as IOError for a failed batch, else OK.
void FlashTier::index_landed(WriteBatch& batch, std::vector<Status>& outcomes,
                             uint64_t& user_bytes) {
  Impl& im = *impl_;
  std::lock_guard lock(im.landing_mu);
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    PendingChunk& c = batch.chunks[i];
    const bool ok = outcomes[i].is_ok();
    if (c.record_flags != 0) continue;  // tombstone or expiry: nothing to index
    if (c.reinsertion) {
      if (!ok) {
        im.index.drop_chunk(c.key, c.key_hash, c.chunk_index, c.old_location);
      } else if (im.index.relocate(c.key, c.key_hash, c.chunk_index, c.version, c.location)) {
        im.metrics.reinsertions.add();
      }
      continue;
    }
    bool removed = c.generation != im.generation;
    auto pending = im.in_flight.find(c.key_hash);
    if (pending != im.in_flight.end()) {
      for (const auto& [key, up_to] : pending->second.removed) {
        if (key == c.key && c.version <= up_to) removed = true;
      }
      if (--pending->second.writes == 0) im.in_flight.erase(pending);
    }
    if (!ok) {
      if (c.staging) c.staging->lost = true;
      continue;
    }
    if (removed) {
      outcomes[i] = Status::conflict("flash: removed while the write was in flight");
      if (c.staging) c.staging->lost = true;
    } else if (c.staging) {
      outcomes[i] = land_staged_locked(c);
      if (outcomes[i].is_ok()) user_bytes += c.data_bytes;
    } else if (!im.index.add(c.key, c.key_hash, c.chunk_index, c.version, c.object_size, c.location,
                             c.chunk_count, c.expire_at_ms)) {
      outcomes[i] = Status::conflict("flash: a newer version was written meanwhile");
    } else {
      user_bytes += c.data_bytes;
    }
  }
}

void FlashTier::log_write_error(const WriteBatch& batch, int64_t result) {
  const std::optional<uint64_t> held_back = impl_->error_log.admit();
  if (!held_back) return;
  spdlog::error("flash: write of {} bytes at offset {} failed: {} ({} more failures not logged)",
                batch.used, batch.offset, std::strerror(static_cast<int>(-result)), *held_back);
}

void FlashTier::flush() {
  Impl& im = *impl_;
  std::vector<IoRequest*> to_submit;
  {
    std::lock_guard lock(im.write_mu);
    if (!im.clearing) append_deferred_meta_locked();
    seal_locked();
    kick_locked(to_submit);
  }
  submit_writes(to_submit);
  {
    std::unique_lock lock(im.write_mu);
    im.writes_idle.wait(lock, [&] {
      return im.writes_in_flight == 0 && im.writes_finishing == 0 && im.sealed.empty() &&
             !im.active;
    });
  }
  if (options_.fsync != FsyncPolicy::kNone) (void)im.device_sync.sync_if_dirty(im.fd.get());
}

void FlashTier::update_space_gauges_locked() {
  Impl& im = *impl_;
  im.metrics.bytes_used.set(static_cast<int64_t>(im.used_bytes));
  im.metrics.bytes_free.set(static_cast<int64_t>(capacity() - im.used_bytes));
  im.metrics.regions_used.set(static_cast<int64_t>(im.fifo.size()));
}

void FlashTier::update_index_gauges() {
  Impl& im = *impl_;
  im.metrics.records.set(static_cast<int64_t>(im.index.chunk_count()));
  im.metrics.objects.set(static_cast<int64_t>(im.index.object_count()));
  im.metrics.index_bytes.set(static_cast<int64_t>(im.index.memory_bytes()));
  const uint64_t user = im.metrics.user_write_bytes.value();
  if (user > 0) {
    im.metrics.write_amplification_permille.set(
        static_cast<int64_t>(im.metrics.device_write_bytes.value() * 1000 / user));
  }
}

FlashStats FlashTier::stats() const {
  Impl& im = *impl_;
  FlashStats s;
  s.capacity_bytes = capacity();
  s.regions = region_count_;
  {
    std::lock_guard lock(im.write_mu);
    s.used_bytes = im.used_bytes;
    s.regions_used = im.fifo.size();
  }
  s.objects = im.index.object_count();
  s.chunks = im.index.chunk_count();
  s.index_bytes = im.index.memory_bytes();
  s.reclaims = im.metrics.reclaims.value();
  {
    std::lock_guard pins(im.pin_mu);
    s.regions_draining = im.regions_draining;
  }
  s.reinsertions = im.metrics.reinsertions.value();
  s.reads = im.metrics.reads.value();
  s.read_bytes = im.metrics.read_bytes.value();
  s.checksum_failures = im.metrics.checksum_failures.value();
  s.device_write_bytes = im.metrics.device_write_bytes.value();
  s.user_write_bytes = im.metrics.user_write_bytes.value();
  s.read_errors = im.metrics.read_errors.value();
  s.write_errors = im.metrics.write_errors.value();
  if (s.user_write_bytes > 0) {
    s.write_amplification =
        static_cast<double>(s.device_write_bytes) / static_cast<double>(s.user_write_bytes);
  }
  return s;
}

uint64_t FlashTier::pending_write_bytes() const {
  std::lock_guard lock(impl_->write_mu);
  return impl_->pending_bytes;
}

std::string_view FlashTier::io_backend() const {
  return impl_->engine->name();
}

}  // namespace tierkv::flash
