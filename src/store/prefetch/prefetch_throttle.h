// PrefetchThrottle: decides which prefetch signals become promotions, so
// probes can never thrash memory or slow the demand path.
//
// * Deduplication: a sharded table of recently prefetched keys. A key whose
//   prefetch is in flight, or failed less than dedup_ttl_ms ago, is not
//   prefetched again. Any other key leaves the table when its job ends: a
//   promoted one is in memory, and once evicted a probe may prefetch it
//   again. In-flight entries never expire; the table has a
//   hard cap (max_entries), and with a TTL of 0 nothing is inserted at all (the promotion registry
//   still refuses a second promotion of a key in flight).
// * Saturation cooldown: the first prefetch that finds no room (memory holds
//   nothing free or clean to drop) starts a cooldown; during it probes queue
//   nothing and the batch stops at the key that met it (early exit).
// * Backoff: while the recent success ratio (promoted / attempted) or the
//   recent accuracy (prefetched objects read before their lease ended) is
//   low, each new cooldown is twice the last, up to max_cooldown_ms; once
//   both recover, the next success resets it to cooldown_ms. A working set
//   far larger than memory thus backs prefetch off exponentially.
// * Demand kick: a GET served from flash may bypass the cooldown, but only
//   until kick_max_failures kicks in a row failed for room.
//
// Pure logic over a caller-supplied clock (now_ms), so tests drive it
// directly. Thread-safe.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/mutex.h"

namespace tierkv {

struct PrefetchThrottleOptions {
  int64_t dedup_ttl_ms = 30000;
  int64_t max_entries = 65536;  // over all shards
  int64_t cooldown_ms = 5000;
  int64_t max_cooldown_ms = 60000;
  int64_t kick_max_failures = 3;
  // Below this share of successes (or of reads per prefetch), cooldowns grow.
  double low_ratio = 0.5;
};

enum class ThrottleVerdict : uint8_t {
  kGo,           // prefetch it; call finish() when the job ends
  kDuplicate,    // in flight or prefetched within the dedup TTL
  kCoolingDown,  // memory was saturated recently: stop the batch here
  kTableFull,    // the dedup table is at its cap
};

// How a throttled job ended, as far as the throttle cares.
enum class ThrottleOutcome : uint8_t {
  kPromoted,   // installed in memory
  kSaturated,  // no room without evicting dirty or leased data
  kFailed,     // read error: counts against the success ratio
  kNeutral,    // gone, already in memory, busy: says nothing about memory
};

class PrefetchThrottle {
 public:
  static constexpr size_t kShards = 16;
  // Outcomes the success ratio looks back over.
  static constexpr int kWindow = 32;

  explicit PrefetchThrottle(const PrefetchThrottleOptions& options = {});
  void set_options(const PrefetchThrottleOptions& options);
  PrefetchThrottleOptions options() const;

  // A probe's request to prefetch `key`. kGo records it in flight.
  ThrottleVerdict admit(std::string_view key, uint64_t hash, int64_t now_ms);
  // The job admitted for `key` ended: a failed one's entry (kSaturated,
  // kFailed) stays for the dedup TTL, any other one's goes.
  void finish(std::string_view key, uint64_t hash, ThrottleOutcome outcome, int64_t now_ms);
  // A demand kick's request; it skips the dedup table (kicks are one per
  // read, and the promotion registry deduplicates them).
  bool admit_kick(int64_t now_ms);
  void finish_kick(ThrottleOutcome outcome, int64_t now_ms);
  // Cumulative counts of prefetched objects read and wasted (leases that
  // ended unread); the throttle keeps the recent share from their deltas.
  void observe_accuracy(uint64_t reads, uint64_t wasted);

  bool cooling_down(int64_t now_ms) const { return now_ms < cooldown_until_ms_.load(); }
  int64_t cooldown_remaining_ms(int64_t now_ms) const;
  // The length the next cooldown will have (it grows under backoff).
  int64_t cooldown_length_ms() const { return cooldown_len_ms_.load(); }
  uint64_t cooldowns_entered() const { return cooldowns_.load(); }
  double recent_success_ratio() const;
  double recent_accuracy() const;
  size_t entries() const { return static_cast<size_t>(entries_.load()); }

 private:
  struct Entry {
    int64_t expires_at_ms = 0;
    bool in_flight = false;
  };
  struct Shard {
    Mutex mu;
    absl::flat_hash_map<std::string, Entry> map ABSL_GUARDED_BY(mu);
  };
  Shard& shard_for(uint64_t hash) { return shards_[hash % kShards]; }
  // Drops expired, settled entries of a full shard; returns how many.
  size_t sweep_locked(Shard& s, int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void record(ThrottleOutcome outcome, int64_t now_ms);
  void enter_cooldown_locked(int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool backoff_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<Shard[]> shards_;
  std::atomic<int64_t> entries_{0};
  std::atomic<int64_t> dedup_ttl_ms_;
  std::atomic<int64_t> max_entries_;

  mutable Mutex mu_;  // the cooldown state below (atomics: written under it)
  PrefetchThrottleOptions options_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> cooldown_until_ms_{0};
  std::atomic<int64_t> cooldown_len_ms_;
  std::atomic<uint64_t> cooldowns_{0};
  int64_t kick_failures_ ABSL_GUARDED_BY(mu_) = 0;
  // the last kWindow outcomes: 1 success
  uint64_t outcome_bits_ ABSL_GUARDED_BY(mu_) = 0;
  int outcomes_ ABSL_GUARDED_BY(mu_) = 0;  // how many of them are filled
  // Decayed recent reads and wasted prefetches, and the last totals seen.
  double recent_reads_ ABSL_GUARDED_BY(mu_) = 0;
  double recent_wasted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_reads_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_wasted_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tierkv
