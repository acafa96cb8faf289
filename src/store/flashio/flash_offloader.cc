#include "store/flashio/flash_offloader.h"

#include "core/clock.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <vector>

namespace tierkv {

FlashOffloader::FlashOffloader(flash::FlashTier& flash, memory::MemoryTier& memory,
                               MetricsRegistry& metrics)
    : flash_(flash),
      memory_(memory),
      write_errors_(metrics.counter("tierkv_offload_write_errors_total",
                                    "object writes to flash that failed")),
      busy_(metrics.counter("tierkv_offload_busy_total",
                            "object writes refused by a full flash write queue")) {}

bool FlashOffloader::holds(std::string_view key, uint64_t, uint64_t version, uint32_t chunk_count) {
  return flash_.contains_object(key, version, chunk_count);
}

memory::OffloadAnswer FlashOffloader::offload(memory::OffloadItem& item) {
  // On refusal the memory tier needs the item's identity back (not its pins).
  std::string key = item.key;
  uint64_t hash = item.hash, version = item.version;
  Status st = submit(std::move(item), {});
  if (st.is_ok()) return memory::OffloadAnswer::kQueued;
  item.key = std::move(key);
  item.hash = hash;
  item.version = version;
  if (st.code() == StatusCode::kBusy) return memory::OffloadAnswer::kBusy;
  return memory::OffloadAnswer::kDrop;
}

void FlashOffloader::reconcile_expiry(std::string_view key, uint64_t version,
                                      int64_t expire_at_ms) {
  std::optional<flash::FlashObjectSummary> f = flash_.summary(key);
  if (f && f->version == version) {
    if (f->expire_at_ms != expire_at_ms) flash_.set_expiry(key, version, expire_at_ms);
    return;
  }
  // Not indexed (yet): a copy still being written lands with the expiry it
  // was given. If the object has expired, make sure it never lands.
  if (expire_at_ms != 0 && expire_at_ms <= unix_time_ms()) flash_.remove(key, version);
}

Status FlashOffloader::write_copy(memory::OffloadItem&& item, std::function<void(Status)> done) {
  return submit(std::move(item), std::move(done));
}

// At most one line a second: a full disk fails every write.
void FlashOffloader::log_write_error(std::string_view key, const Status& error) {
  const std::optional<uint64_t> held_back = error_log_.admit();
  if (!held_back) return;
  spdlog::warn("flash: writing '{}' failed: {} ({} more failures since the last report)", key,
               error.to_string(), *held_back);
}

Status FlashOffloader::submit(memory::OffloadItem&& in, std::function<void(Status)> done) {
  // Shared: the flash callback owns the pins until the batch has landed.
  auto item = std::make_shared<memory::OffloadItem>(std::move(in));
  std::vector<flash::ChunkWrite> writes;
  writes.reserve(item->chunks.size());
  for (size_t i = 0; i < item->chunks.size(); ++i) {
    flash::ChunkWrite w;
    w.key = item->key;
    w.chunk_index = item->chunks[i].index();
    w.version = item->version;
    w.object_size = item->size;
    w.chunk_count = static_cast<uint32_t>(item->chunks.size());
    w.expire_at_ms = item->expire_at_ms;
    w.data = item->chunks[i].bytes();
    writes.push_back(w);
  }
  auto landed = [this, item, done = std::move(done)](Status result) {
    // Conflict: a newer version or a removal got there first; nothing of
    // this version is wanted any more, which is as good as landed.
    bool ok = result.is_ok() || result.code() == StatusCode::kConflict;
    if (!ok) {
      write_errors_.add();
      log_write_error(item->key, result);
    }
    memory_.finish_flash_write(item->key, item->version, item->evicted, ok, item->expire_at_ms);
    if (done) done(ok ? Status::ok() : result);
    if (on_landed_) on_landed_();
  };
  // The item was taken from memory before this call. If the key was
  // overwritten, removed or expired since, that removal found no write in
  // flight to stop: check under a hold, so that one made after the check
  // stops the write, and one made before it means no write at all.
  flash::FlashTier::KeyHold hold = flash_.hold_key(item->key);
  if (!memory_.holds_version(item->key, item->version)) {
    landed(Status::conflict("flash: replaced before its copy was written"));
    return Status::ok();
  }
  Status st = flash_.write_chunks(writes, std::move(landed));
  if (!st.is_ok()) {
    if (st.code() == StatusCode::kBusy) busy_.add();
    // The memory tier still owns the object; give the copy back its state.
    if (!item->evicted) memory_.finish_flash_write(item->key, item->version, false, false);
  }
  return st;
}

}  // namespace tierkv
