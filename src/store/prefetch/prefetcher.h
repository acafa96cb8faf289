// Prefetcher: turns "will read soon" signals into throttled promotions.
//
// Two signals reach it: a probe (Store::exist with prefetch_to_memory, i.e.
// TIER.EXISTS ... PREFETCH, or plain EXISTS with exists-prefetch), and a
// demand kick (a GET served from flash, with demand-kick on). Both go
// through the PrefetchThrottle and then the one promotion machinery
// (Promoter), whose registry and cap they share with promotion-on-hit and
// fetch(). A prefetched object is leased until its first read or
// lease-ttl-ms; leased bytes stay under lease-max-fraction, above which new
// prefetches are refused. A prefetch whose read would come before a useful
// share of its promotion is done is skipped (PrefetchWindow). Every outcome is a counter in the
// registry (tierkv_prefetch_*, tierkv_demand_kicks_*), which INFO # Prefetch and /metrics both
// read.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/metrics.h"
#include "memory/memory_tier.h"
#include "store/prefetch/prefetch_throttle.h"
#include "store/prefetch/prefetch_window.h"
#include "store/promotion/promoter.h"

namespace tierkv {

struct PrefetchOptions {
  PrefetchThrottleOptions throttle;
  bool demand_kick = false;
  // PrefetchWindow's min_share (prefetch-min-window-share).
  double min_window_share = 0.2;
};

class Prefetcher {
 public:
  Prefetcher(Promoter& promoter, memory::MemoryTier& memory, MetricsRegistry& metrics,
             const PrefetchOptions& options);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  void set_options(const PrefetchOptions& options);

  // One probed key, as the indexes found it.
  void note_in_memory();
  void note_absent();
  // A probed key present only on flash. False: the batch stops here (a
  // cooldown is running; the caller reports one early exit per batch).
  bool request(std::string_view key, uint64_t size);
  void note_early_exit() { early_exits_.add(); }

  // Demand kick: whether a flash GET may fire a promotion now, and the
  // request and completion to fire it with.
  bool kick_allowed();
  PromotionRequest kick_request() const;
  PromotionDone kick_done();

  const PrefetchThrottle& throttle() const { return throttle_; }
  const PrefetchWindow& window() const { return window_; }

 private:
  void on_prefetch_done(std::string_view key, uint64_t hash, PromotionOutcome outcome,
                        uint64_t bytes);
  void collect();
  // The promotion request of a prefetch probed at `probed_ns`.
  PromotionRequest prefetch_request(uint64_t probed_ns);

  Promoter& promoter_;
  memory::MemoryTier& memory_;
  MetricsRegistry& metrics_;
  PrefetchThrottle throttle_;
  PrefetchWindow window_;
  std::atomic<bool> demand_kick_;
  std::atomic<int64_t> pending_lease_bytes_{0};  // queued prefetches, not yet leased
  Counter &requested_, &deduplicated_, &in_memory_, &absent_, &queued_, &promoted_,
      &promoted_bytes_, &failed_saturated_, &failed_io_, &failed_gone_, &failed_busy_, &dropped_,
      &early_exits_, &refused_lease_cap_, &refused_table_full_, &skipped_no_window_;
  Counter &kicks_, &kicks_promoted_, &kicks_failed_, &kicks_refused_;
  Gauge &cooldowns_, &cooldown_ms_, &cooldown_remaining_ms_, &reads_served_, &wasted_, &accuracy_,
      &table_entries_, &window_share_, &promotion_us_;
  uint64_t collector_id_ = 0;
};

}  // namespace tierkv
