#include "store/prefetch/prefetch_throttle.h"

#include <algorithm>
#include <bit>

namespace tierkv {
namespace {

// Recent accuracy is kept over roughly this many judged prefetches: older
// ones are halved away.
constexpr double kAccuracyHorizon = 64;
// Too few samples say nothing: no backoff on them.
constexpr int kMinOutcomes = 2;
constexpr double kMinAccuracySamples = 4;

// Debian's abseil has its own string_view type.
absl::string_view absl_view(std::string_view s) {
  return {s.data(), s.size()};
}

}  // namespace

PrefetchThrottle::PrefetchThrottle(const PrefetchThrottleOptions& options)
    : shards_(std::make_unique<Shard[]>(kShards)),
      dedup_ttl_ms_(options.dedup_ttl_ms),
      max_entries_(options.max_entries),
      options_(options),
      cooldown_len_ms_(options.cooldown_ms) {}

void PrefetchThrottle::set_options(const PrefetchThrottleOptions& options) {
  dedup_ttl_ms_.store(options.dedup_ttl_ms);
  max_entries_.store(options.max_entries);
  MutexLock lock(mu_);
  options_ = options;
  cooldown_len_ms_.store(std::clamp(cooldown_len_ms_.load(), options.cooldown_ms,
                                    std::max(options.cooldown_ms, options.max_cooldown_ms)));
}

PrefetchThrottleOptions PrefetchThrottle::options() const {
  MutexLock lock(mu_);
  return options_;
}

ThrottleVerdict PrefetchThrottle::admit(std::string_view key, uint64_t hash, int64_t now_ms) {
  if (cooling_down(now_ms)) return ThrottleVerdict::kCoolingDown;
  // TTL 0: no memory of past prefetches at all, so nothing to bound.
  if (dedup_ttl_ms_.load() <= 0) return ThrottleVerdict::kGo;
  Shard& s = shard_for(hash);
  MutexLock lock(s.mu);
  auto it = s.map.find(absl_view(key));
  if (it != s.map.end()) {
    if (it->second.in_flight || now_ms < it->second.expires_at_ms)
      return ThrottleVerdict::kDuplicate;
    it->second.in_flight = true;
    return ThrottleVerdict::kGo;
  }
  const size_t cap = static_cast<size_t>(std::max<int64_t>(max_entries_.load() / kShards, 1));
  if (s.map.size() >= cap && (sweep_locked(s, now_ms) == 0 || s.map.size() >= cap))
    return ThrottleVerdict::kTableFull;
  s.map.emplace(std::string(key), Entry{.expires_at_ms = 0, .in_flight = true});
  entries_.fetch_add(1);
  return ThrottleVerdict::kGo;
}

size_t PrefetchThrottle::sweep_locked(Shard& s, int64_t now_ms) {
  size_t before = s.map.size();
  absl::erase_if(s.map, [now_ms](const auto& kv) {
    return !kv.second.in_flight && kv.second.expires_at_ms <= now_ms;
  });
  size_t dropped = before - s.map.size();
  entries_.fetch_sub(static_cast<int64_t>(dropped));
  return dropped;
}

void PrefetchThrottle::finish(std::string_view key, uint64_t hash, ThrottleOutcome outcome,
                              int64_t now_ms) {
  {
    Shard& s = shard_for(hash);
    MutexLock lock(s.mu);
    auto it = s.map.find(absl_view(key));
    if (it != s.map.end()) {
      const int64_t ttl = dedup_ttl_ms_.load();
      // Only a failure is remembered. A key now in memory needs no entry:
      // probes find it there, and once it is evicted (read, then pushed
      // out) prefetching it again is right; one refused by a cap, found in
      // memory or gone may be asked for again at the next probe.
      if (ttl <= 0 ||
          (outcome != ThrottleOutcome::kSaturated && outcome != ThrottleOutcome::kFailed)) {
        s.map.erase(it);
        entries_.fetch_sub(1);
      } else {
        it->second.in_flight = false;
        it->second.expires_at_ms = now_ms + ttl;
      }
    }
  }
  record(outcome, now_ms);
}

bool PrefetchThrottle::admit_kick(int64_t now_ms) {
  if (!cooling_down(now_ms)) return true;
  MutexLock lock(mu_);
  return kick_failures_ < options_.kick_max_failures;
}

void PrefetchThrottle::finish_kick(ThrottleOutcome outcome, int64_t now_ms) {
  {
    MutexLock lock(mu_);
    if (outcome == ThrottleOutcome::kSaturated) ++kick_failures_;
    if (outcome == ThrottleOutcome::kPromoted) kick_failures_ = 0;
  }
  record(outcome, now_ms);
}

void PrefetchThrottle::record(ThrottleOutcome outcome, int64_t now_ms) {
  if (outcome == ThrottleOutcome::kNeutral) return;
  MutexLock lock(mu_);
  const bool success = outcome == ThrottleOutcome::kPromoted;
  outcome_bits_ = (outcome_bits_ << 1) | (success ? 1 : 0);
  outcomes_ = std::min(outcomes_ + 1, kWindow);
  if (success) {
    if (!backoff_locked()) cooldown_len_ms_.store(options_.cooldown_ms);
    return;
  }
  if (outcome == ThrottleOutcome::kSaturated && !cooling_down(now_ms))
    enter_cooldown_locked(now_ms);
}

void PrefetchThrottle::enter_cooldown_locked(int64_t now_ms) {
  int64_t len = cooldown_len_ms_.load();
  // The first cooldown of a bad spell has the base length; each one after
  // it, while the ratios stay low, doubles.
  if (cooldowns_.load() > 0 && backoff_locked())
    len = std::min(len * 2, std::max(options_.cooldown_ms, options_.max_cooldown_ms));
  else
    len = options_.cooldown_ms;
  cooldown_len_ms_.store(len);
  cooldown_until_ms_.store(now_ms + len);
  cooldowns_.fetch_add(1);
}

bool PrefetchThrottle::backoff_locked() const {
  const uint64_t mask = outcomes_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << outcomes_) - 1;
  if (outcomes_ >= kMinOutcomes) {
    double ratio = static_cast<double>(std::popcount(outcome_bits_ & mask)) / outcomes_;
    if (ratio < options_.low_ratio) return true;
  }
  const double judged = recent_reads_ + recent_wasted_;
  return judged >= kMinAccuracySamples && recent_reads_ / judged < options_.low_ratio;
}

void PrefetchThrottle::observe_accuracy(uint64_t reads, uint64_t wasted) {
  MutexLock lock(mu_);
  const uint64_t dr = reads >= last_reads_ ? reads - last_reads_ : 0;
  const uint64_t dw = wasted >= last_wasted_ ? wasted - last_wasted_ : 0;
  last_reads_ = reads;
  last_wasted_ = wasted;
  recent_reads_ += static_cast<double>(dr);
  recent_wasted_ += static_cast<double>(dw);
  while (recent_reads_ + recent_wasted_ > kAccuracyHorizon) {
    recent_reads_ /= 2;
    recent_wasted_ /= 2;
  }
}

int64_t PrefetchThrottle::cooldown_remaining_ms(int64_t now_ms) const {
  return std::max<int64_t>(cooldown_until_ms_.load() - now_ms, 0);
}

double PrefetchThrottle::recent_success_ratio() const {
  MutexLock lock(mu_);
  if (outcomes_ == 0) return 1.0;
  const uint64_t mask = (uint64_t{1} << outcomes_) - 1;
  return static_cast<double>(std::popcount(outcome_bits_ & mask)) / outcomes_;
}

double PrefetchThrottle::recent_accuracy() const {
  MutexLock lock(mu_);
  const double judged = recent_reads_ + recent_wasted_;
  return judged > 0 ? recent_reads_ / judged : 1.0;
}

}  // namespace tierkv
