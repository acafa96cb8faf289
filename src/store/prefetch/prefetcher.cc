#include "store/prefetch/prefetcher.h"

#include "core/clock.h"
#include "core/hash.h"

namespace tierkv {
namespace {

ThrottleOutcome throttle_outcome(PromotionOutcome o) {
  switch (o) {
    case PromotionOutcome::kPromoted:
      return ThrottleOutcome::kPromoted;
    case PromotionOutcome::kSaturated:
      return ThrottleOutcome::kSaturated;
    case PromotionOutcome::kIoError:
      return ThrottleOutcome::kFailed;
    default:
      return ThrottleOutcome::kNeutral;
  }
}

}  // namespace

Prefetcher::Prefetcher(Promoter& promoter, memory::MemoryTier& memory, MetricsRegistry& metrics,
                       const PrefetchOptions& options)
    : promoter_(promoter),
      memory_(memory),
      metrics_(metrics),
      throttle_(options.throttle),
      window_(options.min_window_share),
      demand_kick_(options.demand_kick),
      requested_(metrics.counter("tierkv_prefetch_requested_total", "keys probed with prefetch")),
      deduplicated_(metrics.counter("tierkv_prefetch_deduplicated_total",
                                    "prefetches skipped: in flight or done within the dedup TTL")),
      in_memory_(metrics.counter("tierkv_prefetch_in_memory_total",
                                 "probed keys already in memory (no prefetch needed)")),
      absent_(metrics.counter("tierkv_prefetch_absent_total", "probed keys that do not exist")),
      queued_(metrics.counter("tierkv_prefetch_queued_total", "prefetch jobs queued")),
      promoted_(metrics.counter("tierkv_prefetch_promoted_total", "objects prefetched to memory")),
      promoted_bytes_(
          metrics.counter("tierkv_prefetch_promoted_bytes_total", "bytes prefetched to memory")),
      failed_saturated_(metrics.counter("tierkv_prefetch_failed_saturated_total",
                                        "prefetches that found no free or clean memory")),
      failed_io_(metrics.counter("tierkv_prefetch_failed_io_total", "prefetch flash read errors")),
      failed_gone_(metrics.counter("tierkv_prefetch_failed_gone_total",
                                   "prefetched keys deleted, rewritten or expired meanwhile")),
      failed_busy_(metrics.counter("tierkv_prefetch_failed_busy_total",
                                   "prefetches refused: promotion in flight, cap or queue full")),
      dropped_(metrics.counter("tierkv_prefetch_dropped_total",
                               "queued prefetches dropped because a cooldown began")),
      early_exits_(metrics.counter("tierkv_prefetch_early_exits_total",
                                   "probe batches stopped at a key by the cooldown")),
      refused_lease_cap_(metrics.counter("tierkv_prefetch_refused_lease_cap_total",
                                         "prefetches refused: leased bytes at lease-max-fraction")),
      refused_table_full_(metrics.counter("tierkv_prefetch_refused_table_full_total",
                                          "prefetches refused: dedup table at its cap")),
      skipped_no_window_(
          metrics.counter("tierkv_prefetch_skipped_no_window_total",
                          "prefetches skipped: reads come before enough of a promotion is done")),
      kicks_(metrics.counter("tierkv_demand_kicks_total", "promotions fired by flash GETs")),
      kicks_promoted_(
          metrics.counter("tierkv_demand_kicks_promoted_total", "demand kicks that promoted")),
      kicks_failed_(metrics.counter("tierkv_demand_kicks_failed_total",
                                    "demand kicks that did not promote (no room, busy, ...)")),
      kicks_refused_(metrics.counter("tierkv_demand_kicks_refused_total",
                                     "kicks not fired: cooldown after repeated failures")),
      cooldowns_(metrics.gauge("tierkv_prefetch_cooldowns", "saturation cooldowns entered")),
      cooldown_ms_(metrics.gauge("tierkv_prefetch_cooldown_ms",
                                 "length of the current or next cooldown (ms)")),
      cooldown_remaining_ms_(metrics.gauge("tierkv_prefetch_cooldown_remaining_ms",
                                           "ms left of the running cooldown")),
      reads_served_(metrics.gauge("tierkv_prefetch_reads_served",
                                  "reads served from a prefetched object before its lease ended")),
      wasted_(metrics.gauge("tierkv_prefetch_leases_expired_unread",
                            "prefetched objects whose lease ended unread (wasted)")),
      accuracy_(metrics.gauge("tierkv_prefetch_accuracy",
                              "reads served / (reads served + wasted), recent", "", 1000)),
      table_entries_(metrics.gauge("tierkv_prefetch_dedup_entries", "keys in the dedup table")),
      window_share_(metrics.gauge("tierkv_prefetch_window_share",
                                  "share of a promotion done when its read comes, recent", "",
                                  1000)),
      promotion_us_(metrics.gauge("tierkv_prefetch_promotion_us",
                                  "time from probe to install of a prefetch, recent (us)")) {
  collector_id_ = metrics.add_collector([this] { collect(); });
}

Prefetcher::~Prefetcher() {
  metrics_.remove_collector(collector_id_);
}

void Prefetcher::set_options(const PrefetchOptions& options) {
  throttle_.set_options(options.throttle);
  demand_kick_.store(options.demand_kick);
  window_.set_min_share(options.min_window_share);
}

void Prefetcher::collect() {
  throttle_.observe_accuracy(memory_.prefetch_reads(), memory_.prefetch_wasted());
  cooldowns_.set(static_cast<int64_t>(throttle_.cooldowns_entered()));
  cooldown_ms_.set(throttle_.cooldown_length_ms());
  cooldown_remaining_ms_.set(throttle_.cooldown_remaining_ms(unix_time_ms()));
  reads_served_.set(static_cast<int64_t>(memory_.prefetch_reads()));
  wasted_.set(static_cast<int64_t>(memory_.prefetch_wasted()));
  accuracy_.set(static_cast<int64_t>(throttle_.recent_accuracy() * 1000));
  table_entries_.set(static_cast<int64_t>(throttle_.entries()));
  window_.observe_served_reads(memory_.prefetch_reads());
  window_share_.set(static_cast<int64_t>(window_.hidden_share() * 1000));
  promotion_us_.set(static_cast<int64_t>(window_.promotion_ns() / 1000));
}

void Prefetcher::note_in_memory() {
  requested_.add();
  in_memory_.add();
}

void Prefetcher::note_absent() {
  requested_.add();
  absent_.add();
}

bool Prefetcher::request(std::string_view key, uint64_t size) {
  requested_.add();
  if (window_.skip()) {
    skipped_no_window_.add();
    return true;
  }
  const uint64_t hash = hash64(key);
  const int64_t now = unix_time_ms();
  switch (throttle_.admit(key, hash, now)) {
    case ThrottleVerdict::kCoolingDown:
      return false;
    case ThrottleVerdict::kDuplicate:
      deduplicated_.add();
      return true;
    case ThrottleVerdict::kTableFull:
      refused_table_full_.add();
      return true;
    case ThrottleVerdict::kGo:
      break;
  }
  // Leases never make more than lease-max-fraction of memory unevictable:
  // prefetches queued but not yet leased count as leased already.
  const int64_t bytes = static_cast<int64_t>(size);
  if (memory_.leased_bytes() + pending_lease_bytes_.fetch_add(bytes) + bytes >
      memory_.lease_cap_bytes()) {
    pending_lease_bytes_.fetch_sub(bytes);
    refused_lease_cap_.add();
    throttle_.finish(key, hash, ThrottleOutcome::kNeutral, now);
    return true;
  }
  queued_.add();
  const uint64_t probed_ns = mono_ns();
  promoter_.promote(
      key, prefetch_request(probed_ns),
      [this, k = std::string(key), hash, bytes, probed_ns](PromotionOutcome o, uint64_t got) {
        pending_lease_bytes_.fetch_sub(bytes);
        if (o == PromotionOutcome::kPromoted) window_.observe_promotion(mono_ns() - probed_ns);
        on_prefetch_done(k, hash, o, got);
      });
  return true;
}

PromotionRequest Prefetcher::prefetch_request(uint64_t probed_ns) {
  return PromotionRequest{
      .trigger = PromotionTrigger::kPrefetch,
      .lease = true,
      .clean_only = true,
      .still_wanted = [this] { return !throttle_.cooling_down(unix_time_ms()); },
      .on_early_read =
          [this, probed_ns](uint64_t read_at_ns, bool served) {
            window_.observe_early_read(read_at_ns > probed_ns ? read_at_ns - probed_ns : 0, served);
          }};
}

void Prefetcher::on_prefetch_done(std::string_view key, uint64_t hash, PromotionOutcome outcome,
                                  uint64_t bytes) {
  switch (outcome) {
    case PromotionOutcome::kPromoted:
      promoted_.add();
      promoted_bytes_.add(bytes);
      break;
    case PromotionOutcome::kSaturated:
      failed_saturated_.add();
      break;
    case PromotionOutcome::kIoError:
      failed_io_.add();
      break;
    case PromotionOutcome::kGone:
      failed_gone_.add();
      break;
    case PromotionOutcome::kInMemory:
      in_memory_.add();
      break;
    case PromotionOutcome::kBusy:
      failed_busy_.add();
      break;
    case PromotionOutcome::kDropped:
      dropped_.add();
      break;
    case PromotionOutcome::kCancelled:
      break;
  }
  throttle_.finish(key, hash, throttle_outcome(outcome), unix_time_ms());
  throttle_.observe_accuracy(memory_.prefetch_reads(), memory_.prefetch_wasted());
  window_.observe_served_reads(memory_.prefetch_reads());
}

bool Prefetcher::kick_allowed() {
  if (!demand_kick_.load(std::memory_order_relaxed)) return false;
  if (throttle_.admit_kick(unix_time_ms())) return true;
  kicks_refused_.add();
  return false;
}

PromotionRequest Prefetcher::kick_request() const {
  return PromotionRequest{.trigger = PromotionTrigger::kKick,
                          .lease = false,
                          .clean_only = true,
                          .still_wanted = {},
                          .on_early_read = {}};
}

PromotionDone Prefetcher::kick_done() {
  kicks_.add();
  return [this](PromotionOutcome o, uint64_t) {
    (o == PromotionOutcome::kPromoted ? kicks_promoted_ : kicks_failed_).add();
    throttle_.finish_kick(throttle_outcome(o), unix_time_ms());
  };
}

}  // namespace tierkv
