// Store: opening, limits, and the write and removal paths. Reads and the
// key space across both tiers: store_read.cc.
#include "store/store.h"
#include "store/flashio/buffer_budget.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/clock.h"
#include "core/hash.h"
#include "core/status_join.h"
#include "flash/flash_tier.h"
#include "store/flashio/flash_offloader.h"
#include "store/flashio/flash_reader.h"
#include "store/flashio/writeback.h"
#include "store/prefetch/prefetcher.h"
#include "store/preheat/preheater.h"
#include "store/promotion/promoter.h"
#include "store/store_config.h"
#include "store/stream/stream_context.h"
#include "store/worker_pool.h"

namespace tierkv {
namespace {

MetricsRegistry* pick_registry(std::unique_ptr<MetricsRegistry>& owned, MetricsRegistry* given) {
  if (given) return given;
  owned = std::make_unique<MetricsRegistry>();
  return owned.get();
}

}  // namespace

Result<std::unique_ptr<Store>> Store::open(const Config& config, MetricsRegistry* metrics,
                                           OpenMode mode, StoreHooks hooks) {
  TIERKV_RETURN_IF_ERROR(config_validate(config));
  std::unique_ptr<Store> store(new Store(config, metrics));
  store->hooks_ = std::move(hooks);
  // Memory exists at once (stats work while loading); it takes no writes
  // until the flash index says where versions continue.
  store->memory_ = std::make_unique<memory::MemoryTier>(memory_options(config));
  store->streams_ =
      std::make_unique<StreamContext>(*store, *store->memory_, *store->metrics_, config);
  // Before loading, so that stats() may read it while the index loads.
  store->write_buffers_ = std::make_shared<BufferBudget>(
      std::max(config.flash_write_buffer, config.chunk_size),
      BufferBudget::Metrics{
          .used =
              store->metrics_->gauge("tierkv_flash_write_buffer_used_bytes",
                                     "bytes of buffers of values being written to flash as they "
                                     "arrive"),
          .limit = store->metrics_->gauge("tierkv_flash_write_buffer_limit_bytes",
                                          "cap on those buffers (flash-write-buffer)"),
          .waits = store->metrics_->counter("tierkv_flash_write_buffer_waits_total",
                                            "buffers of such values that waited for space")});
  Store* self = store.get();
  store->stream_collector_ = store->metrics_->add_collector([self] {
    StreamMetrics& m = self->streams_->metrics;
    m.lane_bytes.set(self->memory_->use_once_bytes());
    m.useonce_dropped.set(static_cast<int64_t>(self->memory_->use_once_dropped()));
  });
  if (mode == OpenMode::kWait || config.flash_size == 0) {
    store->load(config);
  } else {
    Store* s = store.get();
    store->loader_ = std::thread([s, config] { s->load(config); });
  }
  return store;
}

void Store::load(const Config& config) {
  if (hooks_.before_load) hooks_.before_load();
  open_flash(config);
  memory_->start_active_expiry(static_cast<int>(config.active_expire_hz));
  {
    MutexLock lock(loaded_mu_);
    loaded_.store(true, std::memory_order_release);
  }
  loaded_cv_.notify_all();
}

void Store::wait_loaded() const {
  MutexLock lock(loaded_mu_);
  while (!loaded_.load(std::memory_order_acquire)) loaded_cv_.wait(loaded_mu_);
}

bool Store::wait_loaded_for(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(loaded_mu_);
  while (!loaded_.load(std::memory_order_acquire)) {
    if (!loaded_cv_.wait_until(loaded_mu_, deadline))
      return loaded_.load(std::memory_order_acquire);
  }
  return true;
}

LoadProgress Store::load_progress() const {
  LoadProgress p;
  p.loading = loading();
  p.bytes_done = progress_->bytes_done.load();
  p.bytes_total = progress_->bytes_total.load();
  p.start_ms = static_cast<int64_t>(progress_->start_ms.load());
  p.from_snapshot = progress_->from_snapshot.load();
  return p;
}

Store::Store(const Config& config, MetricsRegistry* metrics)
    : metrics_(pick_registry(owned_metrics_, metrics)),
      max_key_size_(config.max_key_size),
      max_object_size_(config.max_object_size),
      reads_(*metrics_, sizing_options(config),
             [this](size_t key_bytes, uint64_t object_size) {
               return memory_->charge_for_object(key_bytes, object_size);
             }),
      reads_attached_(metrics_->counter(
          "tierkv_prefetch_reads_attached_total",
          "reads served by the key's promotion in flight instead of reading flash again")) {
  progress_ = std::make_unique<flash::RecoveryProgress>();
  preheats_ =
      std::make_unique<PreheatJobs>([this](std::string_view key) { return check_key(key); });
}

// A flash tier that cannot open is not fatal: the store serves from memory
// and says why (INFO flash_error), as a cache should.
void Store::open_flash(const Config& config) {
  if (config.flash_size > 0) {
    flash::FlashOptions fo = flash_options(config);
    fo.progress = progress_.get();
    fo.wrap_engine = hooks_.wrap_flash_engine;
    fo.buffer_pool = &memory_->buffer_pool();
    fo.held_elsewhere = [memory = memory_.get()](std::string_view key, uint64_t version) {
      return memory->holds_version(key, version);
    };
    Result<std::unique_ptr<flash::FlashTier>> f = flash::FlashTier::open(fo, metrics_);
    if (f) {
      flash_ = std::move(*f);
      memory_->raise_next_version(flash_->recovered_max_version() + 1);
    } else {
      flash_status_.error = f.status().message();
      spdlog::error("flash tier disabled, serving from memory only: {}", flash_status_.error);
    }
  }
  if (!flash_) return;
  flash_status_.enabled = true;
  flash_status_.path = flash_->file_path();
  flash_status_.io_backend = std::string(flash_->io_backend());
  flash_status_.direct_io = flash_->direct_io();
  durable_writes_ = config.flash_fsync == FlashFsync::kAlways;
  shutdown_timeout_ms_ = config.shutdown_timeout_ms;
  large_value_fraction_ = config.large_value_memory_fraction;
  write_through_ = config.offload_policy == OffloadPolicy::kWriteThrough;
  offloader_ = std::make_unique<FlashOffloader>(*flash_, *memory_, *metrics_);
  reader_ = std::make_unique<FlashReader>(*flash_, flash_reader_options(config), *metrics_);
  // Read buffers come from the memory tier's pool and go back to it.
  memory_->set_buffer_pool_headroom(reader_->budget().limit());
  // The same histogram the flash tier records into (the registry finds it by name once).
  streams_->read_latency.store(
      &metrics_->latency("tierkv_flash_read_latency", "Chunk read latency"),
      std::memory_order_release);
  // The queue holds what the in-flight cap admits, twice over: a job takes
  // its slot before it is queued.
  pool_ = std::make_unique<WorkerPool>(static_cast<size_t>(config.promotion_workers),
                                       static_cast<size_t>(config.promotion_max_inflight) * 2,
                                       hooks_.before_pool_job);
  streams_->pool.store(pool_.get(), std::memory_order_release);
  promoter_ = std::make_unique<Promoter>(
      *memory_, *flash_, *reader_, key_locks_, *pool_, *metrics_,
      PromoterOptions{.threshold = config.promotion_threshold,
                      .on_hit = config.promotion_on_hit,
                      .max_inflight = config.promotion_max_inflight,
                      .max_inflight_bytes = config.promotion_max_inflight_bytes,
                      .lease_ttl_ms = config.lease_ttl_ms});
  prefetcher_ =
      std::make_unique<Prefetcher>(*promoter_, *memory_, *metrics_, prefetch_options(config));
  apply_prefetch(config);
  open_preheater(config);
  memory_->set_lower_tier(offloader_.get());
  writeback_ = std::make_unique<Writeback>(*memory_, *flash_, *offloader_, *metrics_,
                                           config.dirty_max_fraction);
  offloader_->set_on_landed([this] {
    if (persist_retry_waiting_.load(std::memory_order_relaxed)) retry_persists();
  });
}

Store::~Store() {
  if (streams_) streams_->closing.store(true, std::memory_order_release);
  if (stream_collector_ != 0) metrics_->remove_collector(stream_collector_);
  if (loader_.joinable()) loader_.join();
  // In-flight flash I/O calls back into the memory tier and the promoter:
  // let it finish while they still exist.
  if (memory_) memory_->stop_active_expiry();
  preheats_->attach(nullptr);
  preheater_.reset();  // cancels its jobs and joins its workers while flash_ exists
  if (streams_) streams_->pool.store(nullptr, std::memory_order_release);
  if (pool_) pool_->stop();
  if (writeback_) writeback_->stop();
  // Read callbacks call back into the store (look-ahead pumps read through
  // it): they end before flash_ changes. No look-ahead read starts now.
  if (flash_) flash_->wait_reads_idle();
  flash_.reset();
  for (PendingPersist& p : persist_retry_) p.done(Status::unavailable("store closed"));
}

ExistOptions Store::plain_exists_options() const {
  return ExistOptions{.prefetch_to_memory = exists_prefetch_.load(std::memory_order_relaxed),
                      .prefetch_mapped = has_prefetch_map_.load(std::memory_order_relaxed)};
}

Status Store::check_key(std::string_view key) const {
  if (static_cast<int64_t>(key.size()) > max_key_size_.load(std::memory_order_relaxed))
    return Status::too_large(
        fmt::format("key of {} bytes exceeds max-key-size ({})", key.size(), max_key_size_.load()));
  return Status::ok();
}

Status Store::check_size(uint64_t size) const {
  if (size > static_cast<uint64_t>(max_object_size_.load(std::memory_order_relaxed)))
    return Status::too_large(fmt::format("value of {} bytes exceeds max-object-size ({})", size,
                                         max_object_size_.load()));
  return Status::ok();
}

// --- writes ---

Result<WriteResult> Store::put(std::string_view key, std::string_view value,
                               const WriteOptions& options) {
  TIERKV_RETURN_IF_ERROR(check_key(key));
  TIERKV_RETURN_IF_ERROR(check_size(value.size()));
  Result<ObjectWriter> w = memory_->prepare(key, value.size());
  if (!w) return w.status();
  w->append(value);
  return commit_as(key, std::move(*w), options);
}

Result<ObjectWriter> Store::begin_put(std::string_view key, uint64_t size, bool wait_for_room) {
  TIERKV_RETURN_IF_ERROR(check_key(key));
  TIERKV_RETURN_IF_ERROR(check_size(size));
  std::optional<memory::MemoryTier::NoWaitScope> no_wait;
  if (!wait_for_room) no_wait.emplace();
  return memory_->prepare(key, size);
}

Result<WriteResult> Store::commit(ObjectWriter&& writer, const WriteOptions& options) {
  const std::string key = writer.key();
  return commit_as(key, std::move(writer), options);
}

Result<WriteResult> Store::commit_as(std::string_view key, ObjectWriter&& writer,
                                     const WriteOptions& options) {
  const uint64_t size = writer.size();
  Result<WriteResult> r = publish(key, std::move(writer), options);
  if (r && r->written) reads_.write(key, size);
  return r;
}

Result<WriteResult> Store::publish(std::string_view key, ObjectWriter&& writer,
                                   const WriteOptions& options) {
  if (!flash_) return memory_->publish(std::move(writer), options);
  WriteOptions opts = options;
  // The memory tier judges conditions by memory alone; a key that lives only
  // on flash must count as present.
  bool conditional = opts.condition == WriteCondition::kIfAbsent ||
                     opts.condition == WriteCondition::kIfPresent || opts.keep_ttl;
  if (conditional && !memory_->contains(key)) {
    std::optional<ObjectInfo> below = flash_info(key);
    if (below && opts.condition == WriteCondition::kIfAbsent) return WriteResult{};
    if (below && opts.condition == WriteCondition::kIfPresent)
      opts.condition = WriteCondition::kAlways;
    if (below && opts.keep_ttl) {
      opts.keep_ttl = false;
      opts.expire_at_ms = below->expire_at_ms;
    }
  }
  Result<WriteResult> r = memory_->publish(std::move(writer), opts);
  if (r && r->written) after_write(key, r->version);
  return r;
}

void Store::after_write(std::string_view key, uint64_t version) {
  // Older versions on flash are obsolete now; none may come back after a
  // restart, nor be indexed when a write of one still in flight lands.
  if (durable_writes_) {
    // The new version is being made durable (the writer waits for it) and
    // supersedes them on flash; a tombstone now could outlive it in a crash
    // and lose the older, acknowledged version.
    flash_->forget(key, version);
  } else {
    flash_->remove(key, version - 1, {.lazy = true, .durable = {}});
  }
  if (!write_through_ || durable_writes_) return;
  if (std::optional<memory::OffloadItem> item = memory_->begin_flush(key, version))
    (void)offloader_->write_copy(std::move(*item), {});
}

void Store::persist(std::string_view key, uint64_t version, std::function<void(Status)> done) {
  if (!flash_) return done(Status::ok());
  PendingPersist p{std::string(key), version, std::move(done)};
  Status st = try_persist(p);
  if (st.is_ok()) return;
  if (st.code() != StatusCode::kBusy) return p.done(st);
  // The flash write queue is full: wait for landings, not for the client.
  {
    MutexLock lock(persist_mu_);
    persist_retry_.push_back(std::move(p));
    persist_retry_waiting_.store(true);
  }
  retry_persists();  // a landing may have come between the refusal and now
}

// OK: `p.done` will run (or ran). Otherwise p is untouched.
Status Store::try_persist(PendingPersist& p) {
  // If an offload of this version is already under way, write a second
  // copy rather than track that one: it is rare (evicted at once) and the
  // index takes either record. Nothing comes back when the object is
  // already clean, or was replaced or removed: nothing is owed then.
  std::optional<memory::OffloadItem> item = memory_->begin_flush(p.key, p.version, true);
  if (!item) {
    p.done(Status::ok());
    return Status::ok();
  }
  auto done = std::make_shared<std::function<void(Status)>>(std::move(p.done));
  Status st = offloader_->write_copy(std::move(*item), [done](Status s) { (*done)(s); });
  if (!st.is_ok()) p.done = std::move(*done);
  return st;
}

void Store::retry_persists() {
  std::vector<PendingPersist> batch;
  {
    MutexLock lock(persist_mu_);
    batch.swap(persist_retry_);
    persist_retry_waiting_.store(false);
  }
  std::vector<PendingPersist> still_busy;
  for (PendingPersist& p : batch) {
    Status st = try_persist(p);
    if (st.is_ok()) continue;
    if (st.code() == StatusCode::kBusy)
      still_busy.push_back(std::move(p));
    else
      p.done(st);
  }
  if (still_busy.empty()) return;
  MutexLock lock(persist_mu_);
  for (PendingPersist& p : still_busy) persist_retry_.push_back(std::move(p));
  persist_retry_waiting_.store(true);
}

std::vector<Result<WriteResult>> Store::put_batch(
    std::span<const std::pair<std::string_view, std::string_view>> items,
    const WriteOptions& options) {
  std::vector<Result<WriteResult>> out;
  out.reserve(items.size());
  for (const auto& [k, v] : items) out.push_back(put(k, v, options));
  return out;
}

// --- removal ---

bool Store::remove(std::string_view key, std::optional<uint64_t> if_version,
                   DurableCallback durable) {
  reads_.remove(key);
  if (!flash_) {
    bool removed = memory_->remove(key, if_version);
    if (durable) durable(Status::ok());
    return removed;
  }
  MutexLock lock(key_locks_.for_hash(hash64(key)));
  return remove_both_tiers(key, if_version, std::move(durable));
}

// Under the key's stripe lock. The tombstone covers exactly the newest
// version removed (never the global newest: a SET of the key published
// meanwhile must survive), and with it every older one.
bool Store::remove_both_tiers(std::string_view key, std::optional<uint64_t> if_version,
                              DurableCallback durable) {
  // Every version of the key published before the removal below is at most
  // this; one published after it (a SET racing the DEL) is above it, and its
  // write-through copy may already be indexed on flash by the time flash is
  // asked: the tombstone must not cover it, or it vanishes at restart.
  const uint64_t horizon = memory_->max_version();
  uint64_t in_memory = 0;
  memory_->remove(key, if_version, &in_memory);
  // Only a live flash copy counts (an expired one is dropped on the way,
  // and its record carries its expiry: it needs no tombstone).
  uint64_t on_flash = 0;
  if (std::optional<ObjectInfo> f = flash_info(key)) {
    if (f->version <= horizon && (!if_version || f->version == *if_version)) on_flash = f->version;
  }
  const uint64_t up_to = std::max(in_memory, on_flash);
  if (up_to == 0) {
    if (durable) durable(Status::ok());
    return false;
  }
  // With fsync=always an older version may sit on flash unindexed (an
  // overwrite writes no tombstone then): a removal always writes one.
  flash_->remove(
      key, up_to,
      flash::RemoveOptions{.always_tombstone = durable_writes_, .durable = std::move(durable)});
  return true;
}

size_t Store::remove_batch(std::span<const std::string_view> keys, DurableCallback durable) {
  std::shared_ptr<StatusJoin> join = StatusJoin::make(keys.size(), std::move(durable));
  size_t n = 0;
  for (std::string_view k : keys) n += remove(k, std::nullopt, join->arrival()) ? 1 : 0;
  return n;
}

bool Store::set_expiry(std::string_view key, int64_t expire_at_ms, DurableCallback durable) {
  if (!flash_) {
    bool found = memory_->set_expiry(key, expire_at_ms);
    if (durable) durable(Status::ok());
    return found;
  }
  // Serialised per key: two changes must reach both tiers in one order.
  MutexLock lock(key_locks_.for_hash(hash64(key)));
  std::optional<ObjectInfo> mem = memory_->stat(key);
  bool in_memory = mem && memory_->set_expiry(key, expire_at_ms);
  if (!in_memory) {
    // Flash holds the only copy, if it is live (an expired one stays so).
    std::optional<ObjectInfo> below = flash_info(key);
    if (below) return flash_->set_expiry(key, below->version, expire_at_ms, std::move(durable));
    if (durable) durable(Status::ok());
    return false;
  }
  std::optional<flash::FlashObjectSummary> f = flash_->summary(key);
  if (f && f->version == mem->version) {
    flash_->set_expiry(key, f->version, expire_at_ms, std::move(durable));
    return true;
  }
  // In memory only (a copy may be landing: it is reconciled when it lands).
  // A durable caller waits for a copy written with the new expiry.
  if (durable && durable_writes_) {
    persist(key, mem->version, std::move(durable));
  } else if (durable) {
    durable(Status::ok());
  }
  return in_memory;
}

void Store::flush() {
  memory_->clear();
  if (flash_) flash_->clear();
}

Status Store::close_cleanly() {
  // A copy started after the final flush would discard the snapshot; so
  // would a preheat piece. A job stuck in its source does not stop the
  // memory from being written: past shutdown-timeout-ms it is left behind
  // (the caller exits without waiting for it, see PreheatJobs::stuck()).
  if (preheater_ && !preheater_->stop(std::chrono::milliseconds(shutdown_timeout_ms_))) {
    preheats_->mark_stuck();
    spdlog::warn(
        "preheat jobs still running {} ms after they were cancelled: writing memory "
        "to flash without them",
        shutdown_timeout_ms_);
  }
  if (writeback_) writeback_->stop();
  Status st = persist_all();
  if (!st.is_ok() || !flash_) return st;
  return flash_->write_snapshot();
}

Status Store::persist_all() {
  if (!flash_) return Status::ok();
  std::atomic<uint64_t> failed{0}, queued{0};
  memory_->flush_all_dirty([&](memory::OffloadItem&& item) {
    std::string key = item.key;
    uint64_t version = item.version;
    // Shutdown may wait: wait out a full write queue instead of skipping.
    for (int attempt = 0;; ++attempt) {
      Status st = offloader_->write_copy(std::move(item), [&failed](Status s) {
        if (!s.is_ok()) failed.fetch_add(1);
      });
      if (st.is_ok()) {
        queued.fetch_add(1);
        return;
      }
      if (st.code() != StatusCode::kBusy || attempt >= 1000) {
        failed.fetch_add(1);
        return;
      }
      flash_->flush();
      std::optional<memory::OffloadItem> again = memory_->begin_flush(key, version);
      if (!again) return;
      item = std::move(*again);
    }
  });
  flash_->flush();
  if (failed.load() > 0)
    return Status::io_error(fmt::format("{} of {} objects not written to flash", failed.load(),
                                        queued.load() + failed.load()));
  spdlog::info("persisted {} objects from memory to flash", queued.load());
  return Status::ok();
}

}  // namespace tierkv
