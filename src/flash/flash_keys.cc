// FlashTier's index-side calls: lookups, expiry, removal, clear and the key
// space. The I/O paths are in flash_tier.cc, opening and recovery in
// flash_open.cc.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "core/hash.h"
#include "flash/exact_io.h"
#include "flash/flash_tier.h"
#include "flash/flash_tier_internal.h"
#include "flash/record.h"

namespace tierkv::flash {

// Writes exactly `length` bytes at `offset` (flash_open.cc).

std::optional<FlashObjectInfo> FlashTier::lookup(std::string_view key) const {
  return impl_->index.object(key, impl_->index.key_hash(key));
}

std::optional<FlashObjectSummary> FlashTier::summary(std::string_view key) const {
  return impl_->index.summary(key, impl_->index.key_hash(key));
}

bool FlashTier::contains(std::string_view key, uint32_t chunk_index,
                         std::optional<uint64_t> version) const {
  return impl_->index.lookup(key, impl_->index.key_hash(key), chunk_index, version, false)
      .has_value();
}

bool FlashTier::contains_object(std::string_view key, uint64_t version,
                                uint32_t chunk_count) const {
  return impl_->index.has_chunks(key, impl_->index.key_hash(key), version, chunk_count);
}

FlashTier::WriteCallback FlashTier::append_meta_locked(PendingChunk chunk,
                                                       std::vector<IoRequest*>& to_submit) {
  Impl& im = *impl_;
  im.write_mu.assert_held();
  // clear() wipes whatever this record would describe: as good as landed.
  // The caller runs the callback once it has let go of write_mu.
  if (im.clearing) return std::move(chunk.done);
  if (chunk.lazy) {
    im.lazy_meta_bytes += record_size(chunk.key.size(), 0);
    im.lazy_meta.push_back(std::move(chunk));
    if (im.lazy_meta_bytes < kBlockSize) return {};
    release_lazy_meta_locked();
    im.log.kick(to_submit);
    return {};
  }
  im.deferred_meta.push_back(std::move(chunk));
  append_deferred_meta_locked();
  im.log.kick(to_submit);
  return {};
}

void FlashTier::release_lazy_meta_locked() {
  Impl& im = *impl_;
  im.write_mu.assert_held();
  // After the records already deferred: meta records keep their order.
  for (PendingChunk& meta : im.lazy_meta) im.deferred_meta.push_back(std::move(meta));
  im.lazy_meta.clear();
  im.lazy_meta_bytes = 0;
  append_deferred_meta_locked();
}

void FlashTier::append_deferred_meta_locked() {
  Impl& im = *impl_;
  im.write_mu.assert_held();
  while (!im.deferred_meta.empty()) {
    // Meta records are one block each and skip the pending-bytes limit. The
    // copy stays queued if there is no room yet (Busy: retried on landing).
    if (!append_locked(im.deferred_meta.front(), {}).is_ok()) return;
    im.deferred_meta.pop_front();
  }
}

bool FlashTier::write_meta(std::string_view key, uint64_t key_hash, uint64_t version,
                           MetaRecord meta, WriteCallback done,
                           absl::FunctionRef<bool()> index_first) {
  Impl& im = *impl_;
  std::vector<IoRequest*> to_submit;
  WriteCallback unwritten;  // run once write_mu is let go
  bool indexed = false;
  {
    MutexLock lock(im.write_mu);
    indexed = index_first();
    if (indexed) {
      PendingChunk record;
      record.key.assign(key);
      record.key_hash = key_hash;
      record.version = version;
      record.expire_at_ms = meta.expire_at_ms;
      record.record_flags = meta.flags;
      record.lazy = meta.lazy;
      record.done = std::move(done);
      unwritten = append_meta_locked(std::move(record), to_submit);
    } else {
      unwritten = std::move(done);
    }
  }
  LogWriter::submit(*im.engine, to_submit);
  if (unwritten) unwritten(Status::ok());
  return indexed;
}

void FlashTier::release_lazy_records() {
  Impl& im = *impl_;
  std::vector<IoRequest*> to_submit;
  {
    MutexLock lock(im.write_mu);
    if (im.clearing || im.lazy_meta.empty()) return;
    release_lazy_meta_locked();
    im.log.kick(to_submit);
  }
  LogWriter::submit(*im.engine, to_submit);
}

bool FlashTier::set_expiry(std::string_view key, uint64_t version, int64_t expire_at_ms,
                           std::function<void(Status)> durable) {
  const uint64_t key_hash = impl_->index.key_hash(key);
  return write_meta(key, key_hash, version, {.flags = kRecordExpiry, .expire_at_ms = expire_at_ms},
                    std::move(durable),
                    [&] { return impl_->index.set_expiry(key, key_hash, version, expire_at_ms); });
}

std::pair<bool, bool> FlashTier::drop_versions(std::string_view key, uint64_t key_hash,
                                               uint64_t up_to_version) {
  Impl& im = *impl_;
  MutexLock lock(im.landing_mu);
  const bool dropped = im.index.remove_up_to(key, key_hash, up_to_version);
  auto pending = im.in_flight.find(key_hash);
  if (pending == im.in_flight.end()) return {dropped, false};
  auto& removed = pending->second.removed;
  auto same =
      std::find_if(removed.begin(), removed.end(), [&](const auto& r) { return r.first == key; });
  if (same == removed.end()) {
    removed.emplace_back(std::string(key), up_to_version);
  } else {
    same->second = std::max(same->second, up_to_version);
  }
  return {dropped, true};
}

bool FlashTier::remove(std::string_view key, uint64_t up_to_version, RemoveOptions options) {
  const uint64_t key_hash = impl_->index.key_hash(key);
  auto [dropped, writes_pending] = drop_versions(key, key_hash, up_to_version);
  if (dropped) update_index_gauges();
  if (!dropped && !writes_pending && !options.always_tombstone) {
    if (options.durable) options.durable(Status::ok());
    return false;
  }
  (void)write_meta(key, key_hash, up_to_version,
                   {.flags = kRecordTombstone, .lazy = options.lazy && !options.durable},
                   std::move(options.durable), [] { return true; });
  return dropped;
}

FlashTier::KeyHold FlashTier::hold_key(std::string_view key) {
  const uint64_t key_hash = impl_->index.key_hash(key);
  MutexLock lock(impl_->landing_mu);
  ++impl_->in_flight[key_hash].writes;
  return KeyHold(this, key_hash);
}

FlashTier::KeyHold::~KeyHold() {
  if (tier_ == nullptr) return;
  Impl& im = *tier_->impl_;
  MutexLock lock(im.landing_mu);
  auto it = im.in_flight.find(hash_);
  if (it != im.in_flight.end() && --it->second.writes == 0) im.in_flight.erase(it);
}

bool FlashTier::forget(std::string_view key, uint64_t below_version) {
  if (below_version == 0) return false;
  const bool dropped = drop_versions(key, impl_->index.key_hash(key), below_version - 1).first;
  if (dropped) update_index_gauges();
  return dropped;
}

void FlashTier::clear() {
  Impl& im = *impl_;
  MutexLock lock(im.write_mu);
  while (im.clearing) im.log.wait(im.write_mu);
  im.clearing = true;  // new writes get Busy until the wipe is done
  {
    MutexLock landing(im.landing_mu);
    ++im.generation;  // what is in flight lands unindexed
    im.index.clear();
    im.region_lists.clear();
    for (auto& [hash, pending] : im.in_flight) pending.removed.clear();
  }
  // Reads that started before find other records there now: a race, not corruption.
  im.reclaim_epoch.fetch_add(1, std::memory_order_acq_rel);
  std::vector<IoRequest*> to_submit;
  im.log.seal();
  im.log.kick(to_submit);
  lock.unlock();
  LogWriter::submit(*im.engine, to_submit);
  lock.lock();
  // A region header still in flight would bring its region back: wait.
  while (!im.log.idle()) im.log.wait(im.write_mu);
  Status st = wipe_region_headers();
  if (!st.is_ok()) {
    spdlog::error(
        "flash: clear could not wipe the region headers ({}); a restart may recover "
        "data written before it",
        st.to_string());
  }
  im.regions.free_all();
  im.log.forget_active_region();
  // What they would have recorded is wiped: as good as landed.
  std::deque<PendingChunk> wiped = std::move(im.deferred_meta);
  im.deferred_meta.clear();
  for (PendingChunk& meta : im.lazy_meta) wiped.push_back(std::move(meta));
  im.lazy_meta.clear();
  im.lazy_meta_bytes = 0;
  im.clearing = false;
  update_space_gauges_locked();
  im.log.notify();
  lock.unlock();
  for (PendingChunk& meta : wiped)
    if (meta.done) meta.done(Status::ok());
  update_index_gauges();
}

// Writes a "free" header over every region, all with one fresh seq: recovery
// then finds no live region, and still numbers later incarnations above every
// seq used before, so no stale record can match a new header.
Status FlashTier::wipe_region_headers() {
  Impl& im = *impl_;
  Result<uint64_t> watermark = impl_->super->take_seq();
  if (!watermark.is_ok()) return watermark.status();
  AlignedBuffer header(kBlockSize);
  for (uint32_t r = 0; r < region_count_; ++r) {
    encode_region_header(header.data(), r, *watermark, options_.region_size, salt(), kRegionFree);
    TIERKV_RETURN_IF_ERROR(write_exact(im.fd.get(), header.data(), kBlockSize, region_start(r)));
  }
  if (::fdatasync(im.fd.get()) != 0) {
    return Status::io_error(std::string("flash: fdatasync: ") + std::strerror(errno));
  }
  im.metrics.fsyncs.add();
  im.device_sync.mark_synced();
  return Status::ok();
}

size_t FlashTier::key_shard_count() const {
  return impl_->index.shard_count();
}

std::vector<std::string> FlashTier::keys_in_shard(size_t shard) const {
  return impl_->index.keys_in_shard(static_cast<uint32_t>(shard));
}

std::vector<std::string> FlashTier::keys_from(uint64_t from_hash, size_t max,
                                              uint64_t* next) const {
  return impl_->index.keys_from(from_hash, max, next);
}

std::optional<std::string> FlashTier::random_key() const {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return impl_->index.random_key(rng());
}

uint64_t FlashTier::object_count() const {
  return impl_->index.object_count();
}

uint64_t FlashTier::compact_object_count() const {
  return impl_->index.compact_count();
}

}  // namespace tierkv::flash
