#include "store/store_config.h"

#include "store/flashio/buffer_budget.h"
#include "store/flashio/flash_reader.h"
#include "store/flashio/writeback.h"
#include "store/preheat/preheater.h"
#include "store/promotion/promoter.h"
#include "store/store.h"
#include "store/stream/stream_context.h"

namespace tierkv {
namespace {

// Config's enumerations were parsed once, in core: these switches cover
// every value (-Wswitch), so there is no fallback to get wrong.
memory::PolicyKind policy_kind(EvictionPolicyKind p) {
  switch (p) {
    case EvictionPolicyKind::kS3Fifo:
      return memory::PolicyKind::kS3Fifo;
    case EvictionPolicyKind::kLru:
      return memory::PolicyKind::kLru;
    case EvictionPolicyKind::kClock:
      return memory::PolicyKind::kClock;
    case EvictionPolicyKind::kSieve:
      return memory::PolicyKind::kSieve;
  }
  return memory::PolicyKind::kS3Fifo;  // unreachable: every value is handled
}

flash::FsyncPolicy fsync_policy(FlashFsync f) {
  switch (f) {
    case FlashFsync::kNone:
      return flash::FsyncPolicy::kNone;
    case FlashFsync::kEverySec:
      return flash::FsyncPolicy::kEverySec;
    case FlashFsync::kAlways:
      return flash::FsyncPolicy::kAlways;
  }
  return flash::FsyncPolicy::kNone;  // unreachable: every value is handled
}

}  // namespace

memory::MemoryTierOptions memory_options(const Config& c) {
  memory::MemoryTierOptions o;
  o.budget_bytes = c.memory;
  o.chunk_size = static_cast<uint32_t>(c.chunk_size);
  o.policy = policy_kind(c.eviction_policy);
  o.shards = static_cast<uint32_t>(c.memory_shards);
  o.lease_max_fraction = c.lease_max_fraction;
  o.offload_wait_ms = c.offload_wait_ms;
  return o;
}

SizingOptions sizing_options(const Config& c) {
  SizingOptions o;
  o.sample_rate = c.mrc_sample_rate;
  o.max_bytes = static_cast<uint64_t>(c.mrc_max_bytes);
  o.memory_bytes = static_cast<uint64_t>(c.memory);
  o.flash_bytes = static_cast<uint64_t>(c.flash_size);
  o.policy = policy_kind(c.eviction_policy);
  return o;
}

PrefetchOptions prefetch_options(const Config& c) {
  PrefetchOptions o;
  o.throttle.dedup_ttl_ms = c.prefetch_dedup_ttl_ms;
  o.throttle.max_entries = c.prefetch_dedup_max_entries;
  o.throttle.cooldown_ms = c.prefetch_cooldown_ms;
  o.throttle.max_cooldown_ms = c.prefetch_cooldown_max_ms;
  o.throttle.kick_max_failures = c.demand_kick_max_failures;
  o.demand_kick = c.demand_kick;
  o.min_window_share = c.prefetch_min_window_share;
  return o;
}

std::string Store::beside_flash(const Config& config, std::string_view suffix) {
  if (config.flash_size == 0) return {};
  const flash::FlashFile file = flash::flash_file(config.flash_path);
  if (file.block_device) return {};
  return file.path + std::string(suffix);
}

flash::FlashOptions flash_options(const Config& c) {
  flash::FlashOptions o;
  o.path = c.flash_path;
  o.size = static_cast<uint64_t>(c.flash_size);
  o.region_size = static_cast<uint64_t>(c.region_size);
  o.fsync = fsync_policy(c.flash_fsync);
  o.queue_depth = static_cast<uint32_t>(c.flash_queue_depth);
  o.reinsertion = c.flash_reinsertion;
  o.reinsertion_share = c.flash_reinsertion_share;
  o.snapshot_area = c.flash_snapshot_area;
  o.preallocate = c.flash_preallocate;
  o.direct_io = c.flash_direct_io;
  o.page_cache_reads = c.flash_page_cache_reads;
  o.max_pending_write_bytes = static_cast<uint64_t>(c.flash_write_queue);
  o.backing_latency_ns = static_cast<uint64_t>(c.backing_latency_ns);
  o.backing_bandwidth = static_cast<uint64_t>(c.backing_bandwidth);
  o.key_load_delay_us = static_cast<uint64_t>(c.key_load_delay_us);
  return o;
}

PreheatLimits preheat_limits(const Config& config) {
  return PreheatLimits{.sources = config.preheat_sources,
                       .max_jobs = static_cast<uint32_t>(config.preheat_max_jobs),
                       .pieces_inflight = static_cast<uint32_t>(config.preheat_pieces_inflight),
                       .retries = static_cast<uint32_t>(config.preheat_retries),
                       .max_queued = static_cast<uint32_t>(config.preheat_max_queued),
                       .buffer_bytes = static_cast<uint64_t>(config.preheat_buffer),
                       .max_files = static_cast<uint32_t>(config.preheat_max_files)};
}

// One case per hook, as the server's ServerContext::apply_config has: a
// new hook that neither handles does not compile (-Wswitch).
Status Store::apply_config(ConfigApply hook, const Config& next) {
  switch (hook) {
    case ConfigApply::kMemoryBudget:
      return memory_->set_budget(next.memory);
    case ConfigApply::kObjectLimits:
      max_key_size_.store(next.max_key_size);
      max_object_size_.store(next.max_object_size);
      return Status::ok();
    case ConfigApply::kPromotion:
      if (promoter_) {
        promoter_->set_limits(next.promotion_threshold, next.promotion_max_inflight,
                              next.promotion_max_inflight_bytes);
        promoter_->set_on_hit(next.promotion_on_hit);
      }
      return Status::ok();
    case ConfigApply::kPrefetch:
      apply_prefetch(next);
      return Status::ok();
    case ConfigApply::kOffloadWait:
      memory_->set_offload_wait_ms(next.offload_wait_ms);
      return Status::ok();
    case ConfigApply::kLeaseTtl:
      if (promoter_) promoter_->set_lease_ttl_ms(next.lease_ttl_ms);
      return Status::ok();
    case ConfigApply::kLeaseFraction:
      memory_->set_lease_max_fraction(next.lease_max_fraction);
      return Status::ok();
    case ConfigApply::kActiveExpire:
      memory_->start_active_expiry(static_cast<int>(next.active_expire_hz));
      return Status::ok();
    case ConfigApply::kDirtyFraction:
      if (writeback_) writeback_->set_dirty_max_fraction(next.dirty_max_fraction);
      return Status::ok();
    case ConfigApply::kPreheat:
      if (preheater_) preheater_->set_limits(preheat_limits(next));
      return Status::ok();
    case ConfigApply::kFlashRead:
      apply_flash_read(next);
      return Status::ok();
    case ConfigApply::kFlashWrite:
      write_buffers_->set_limit(next.flash_write_buffer);
      return Status::ok();
    case ConfigApply::kStream:
      streams_->set_defaults(next);
      return Status::ok();
    case ConfigApply::kNone:
    case ConfigApply::kNetworkLimits:
    case ConfigApply::kMaxClients:
    case ConfigApply::kLogLevel:
    case ConfigApply::kMetricsLimits:
    case ConfigApply::kSlowlog:
    case ConfigApply::kTls:
      break;
  }
  return Status::invalid_argument("not a setting of the store");
}

void Store::apply_prefetch(const Config& config) {
  exists_prefetch_.store(config.exists_prefetch);
  {
    MutexLock lock(prefetch_map_mu_);
    prefetch_map_ = config.exists_prefetch_map;
    has_prefetch_map_.store(!prefetch_map_.empty());
  }
  if (prefetcher_) prefetcher_->set_options(prefetch_options(config));
}

void Store::apply_flash_read(const Config& config) {
  if (!reader_) return;
  reader_->set_defaults(ReadWindow{.depth = static_cast<uint32_t>(config.flash_read_window),
                                   .parallel = static_cast<uint32_t>(config.flash_read_inflight)});
  if (config.flash_read_buffer > 0) {
    reader_->budget().set_limit(config.flash_read_buffer);
    memory_->set_buffer_pool_headroom(config.flash_read_buffer);
  }
}

}  // namespace tierkv
