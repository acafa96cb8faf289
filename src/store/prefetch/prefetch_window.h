// PrefetchWindow: learns whether probes come early enough for a prefetch to
// pay, so prefetches whose reads would come right behind them are skipped.
//
// A prefetch hides the part of its promotion that is done when the read
// comes. That share is learnt from the reads that prefetched objects serve:
// a read that came while its promotion was in flight, `gap` after the
// probe, found gap / promotion time of it done (at most 1); a read that came
// after the install found all of it done. Both the share and the promotion
// time (probe to install) are exponentially weighted moving averages.
//
// While the learnt share is below min_share, a prefetch saves the read less
// than it costs (a pool job, an install, memory it displaces) and is
// skipped; one in kExploreEvery skipped prefetches still goes, so the share
// is learnt again when the probes move ahead of their reads. Nothing is
// skipped before kMinSamples promotions and reads were seen, or with a
// min_share of 0.
//
// Thread-safe; times are caller-supplied nanoseconds, so tests drive it.
#pragma once

#include <cstdint>

#include "core/mutex.h"

namespace tierkv {

class PrefetchWindow {
 public:
  static constexpr int kExploreEvery = 8;
  static constexpr int kMinSamples = 4;
  static constexpr double kWeight = 1.0 / 8;  // of each new sample

  explicit PrefetchWindow(double min_share = 0.2) : min_share_(min_share) {}

  void set_min_share(double share);
  // A prefetch was installed `elapsed_ns` after its probe.
  void observe_promotion(uint64_t elapsed_ns);
  // A read came `gap_ns` after the probe, while the promotion was in flight.
  // `served`: the memory tier counts it as a prefetch read (it attached).
  void observe_early_read(uint64_t gap_ns, bool served);
  // The memory tier's running count of reads that prefetches served: the
  // ones not reported early came after their install.
  void observe_served_reads(uint64_t total);
  // Whether the next prefetch is skipped (see above).
  bool skip();

  double hidden_share() const;
  uint64_t promotion_ns() const;

 private:
  void add_share_locked(double share, uint64_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  double min_share_ ABSL_GUARDED_BY(mu_);
  double promotion_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int promotions_ ABSL_GUARDED_BY(mu_) = 0;
  double share_ ABSL_GUARDED_BY(mu_) = 1.0;
  int reads_ ABSL_GUARDED_BY(mu_) = 0;
  // early reads the memory tier counts
  uint64_t early_served_ ABSL_GUARDED_BY(mu_) = 0;
  // served reads after an install, folded in
  int64_t late_seen_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t skips_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tierkv
