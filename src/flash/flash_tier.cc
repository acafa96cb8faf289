// FlashTier's writes: accepting chunks, choosing each new region, and
// indexing what lands. Batching and group commit are LogWriter's; the
// region table is RegionManager's. Reads: flash_read.cc; opening and
// recovery: flash_open.cc.
#include "flash/flash_tier.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/hash.h"
#include "core/status_join.h"
#include "flash/flash_tier_internal.h"
#include "flash/record.h"
#include "flash/reinsertion_policy.h"

namespace tierkv::flash {

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
  auto join = StatusJoin::make(chunks.size(), std::move(done));
  std::vector<WriteCallback> callbacks;
  for (size_t i = 0; i < chunks.size(); ++i) callbacks.push_back(join->arrival());
  Status st = enqueue_writes(chunks, std::move(callbacks));
  // Chunks queued before the failure still land; the caller hears only
  // this error, so the joined callback must not run.
  if (!st.is_ok()) join->cancel();
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
    MutexLock lock(im.write_mu);
    if (im.clearing) return Status::busy("flash is being cleared");
    const uint64_t pending = im.log.pending_bytes();
    if (pending > 0 && pending + total > options_.max_pending_write_bytes) {
      return Status::busy("flash write queue full");
    }
    size_t appended = 0;
    for (; appended < chunks.size(); ++appended) {
      const ChunkWrite& c = chunks[appended];
      PendingChunk p;
      p.key.assign(c.key);
      p.key_hash = impl_->index.key_hash(c.key);
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
      MutexLock landing(im.landing_mu);
      for (size_t i = 0; i < appended; ++i)
        ++im.in_flight[impl_->index.key_hash(chunks[i].key)].writes;
    }
    im.log.kick(to_submit);
  }
  LogWriter::submit(*im.engine, to_submit);
  return st;
}

Status FlashTier::append_locked(PendingChunk chunk, std::string_view data) {
  Impl& im = *impl_;
  im.write_mu.assert_held();
  TIERKV_RETURN_IF_ERROR(drop_snapshot_locked());
  if (chunk.version > im.max_version_seen.load(std::memory_order_relaxed))
    im.max_version_seen.store(chunk.version, std::memory_order_relaxed);
  if (!im.log.has_room(record_size(chunk.key.size(), data.size()))) {
    TIERKV_RETURN_IF_ERROR(open_region_locked());
  }
  im.log.append(std::move(chunk), data);
  update_space_gauges_locked();
  return Status::ok();
}

Status FlashTier::open_region_locked() {
  Impl& im = *impl_;
  im.write_mu.assert_held();
  // Before anything changes: a failure here leaves the tier as it was.
  Result<uint64_t> seq = impl_->super->take_seq();
  if (!seq.is_ok()) return seq.status();
  std::optional<uint32_t> region = im.regions.take_free();
  // Reclaim the oldest region here. With reinsertion, the reclaimer thread
  // has copied its read chunks forward already (unless writers outran it:
  // then they go, since copying would read the device here). One that
  // reads still pin drains; the next oldest goes too.
  while (!region) {
    if (im.regions.written().empty())
      return Status::busy("flash: every region is being reclaimed or read");
    if (!im.regions.next_victim())
      return Status::busy("flash: oldest region still has writes in flight");
    const uint32_t victim = im.regions.take_victim();
    if (reclaim_locked(victim)) region = victim;
  }
  im.log.start_region(*region, *seq);
  update_space_gauges_locked();
  im.regions.wake_reclaimer();
  return Status::ok();
}

void FlashTier::on_write_done(WriteBatch* raw, int64_t result) {
  Impl& im = *impl_;
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
    MutexLock lock(im.write_mu);
    im.log.release_landed(*batch, ok);
    if (!im.deferred_meta.empty() && !im.clearing) append_deferred_meta_locked();
    im.log.kick(next);
  }
  LogWriter::submit(*im.engine, next);
  update_index_gauges();
  for (size_t i = 0; i < batch->chunks.size(); ++i) {
    if (batch->chunks[i].done) batch->chunks[i].done(std::move(outcomes[i]));
  }
  // flush() returns only after the callbacks of what it waited for have run.
  MutexLock lock(im.write_mu);
  im.log.finish_callbacks();
}

// `outcomes` arrive as IOError for a failed batch, else OK.
void FlashTier::index_landed(WriteBatch& batch, std::vector<Status>& outcomes,
                             uint64_t& user_bytes) {
  Impl& im = *impl_;
  MutexLock lock(im.landing_mu);
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
    if (ok) spoil_region_list_locked(c.location);
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
      if (c.staging) c.staging->lost = c.staging->superseded = true;
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
    MutexLock lock(im.write_mu);
    if (!im.clearing) release_lazy_meta_locked();
    im.log.seal();
    im.log.kick(to_submit);
  }
  LogWriter::submit(*im.engine, to_submit);
  {
    MutexLock lock(im.write_mu);
    while (!im.log.idle()) im.log.wait(im.write_mu);
  }
  if (options_.fsync != FsyncPolicy::kNone) (void)im.device_sync.sync_if_dirty(im.fd.get());
}

void FlashTier::update_space_gauges_locked() {
  Impl& im = *impl_;
  im.write_mu.assert_held();
  const uint64_t used = im.regions.used_bytes();
  im.metrics.bytes_used.set(static_cast<int64_t>(used));
  im.metrics.bytes_free.set(static_cast<int64_t>(capacity() - used));
  im.metrics.regions_used.set(static_cast<int64_t>(im.regions.written().size()));
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
    MutexLock lock(im.write_mu);
    s.used_bytes = im.regions.used_bytes();
    s.regions_used = im.regions.written().size();
  }
  s.objects = im.index.object_count();
  s.compact_objects = im.index.compact_count();
  s.chunks = im.index.chunk_count();
  s.index_bytes = im.index.memory_bytes();
  s.reclaims = im.metrics.reclaims.value();
  s.reclaim_index_walks = im.metrics.reclaim_index_walks.value();
  s.reclaim_region_reads = im.metrics.reclaim_region_reads.value();
  s.regions_draining = im.regions.draining_count();
  s.reinsertions = im.metrics.reinsertions.value();
  if (const ReinsertionPolicy* policy = im.regions.reinsertion()) {
    const ReinsertionPolicy::Evidence e = policy->evidence();
    s.reinsert_fresh_read_share = e.fresh_read_share;
    s.reinsert_copies_read_share = e.copies_read_share;
    s.reinsert_copying = e.copying;
  }
  s.reads = im.metrics.reads.value();
  s.read_bytes = im.metrics.read_bytes.value();
  s.checksum_failures = im.metrics.checksum_failures.value();
  s.key_collisions = im.metrics.key_collisions.value();
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
  MutexLock lock(impl_->write_mu);
  return impl_->log.pending_bytes();
}

std::string_view FlashTier::io_backend() const {
  return impl_->engine->name();
}

}  // namespace tierkv::flash
