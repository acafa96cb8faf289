#include "store/prefetch/prefetch_window.h"

#include <algorithm>
#include <cmath>

namespace tierkv {

void PrefetchWindow::set_min_share(double share) {
  MutexLock lock(mu_);
  min_share_ = share;
}

void PrefetchWindow::observe_promotion(uint64_t elapsed_ns) {
  MutexLock lock(mu_);
  const auto t = static_cast<double>(elapsed_ns);
  promotion_ns_ = promotions_ == 0 ? t : promotion_ns_ + kWeight * (t - promotion_ns_);
  if (promotions_ < kMinSamples) ++promotions_;
}

void PrefetchWindow::observe_early_read(uint64_t gap_ns, bool served) {
  MutexLock lock(mu_);
  if (served) ++early_served_;
  // Before any promotion was timed, the read says nothing yet.
  if (promotions_ == 0 || promotion_ns_ <= 0) return;
  add_share_locked(std::min(static_cast<double>(gap_ns) / promotion_ns_, 1.0), 1);
}

void PrefetchWindow::observe_served_reads(uint64_t total) {
  MutexLock lock(mu_);
  // An early read is reported here just before the memory tier counts it,
  // so the difference may trail by one for a moment: never fold back.
  const int64_t late = static_cast<int64_t>(total) - static_cast<int64_t>(early_served_);
  if (late <= late_seen_) return;
  add_share_locked(1.0, static_cast<uint64_t>(late - late_seen_));
  late_seen_ = late;
}

void PrefetchWindow::add_share_locked(double share, uint64_t count) {
  // `count` equal samples at once: the old average keeps (1 - w)^count.
  const double keep = std::pow(1.0 - kWeight, static_cast<double>(std::min<uint64_t>(count, 1000)));
  share_ = reads_ == 0 ? share : share + keep * (share_ - share);
  reads_ = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(reads_) + count, kMinSamples));
}

bool PrefetchWindow::skip() {
  MutexLock lock(mu_);
  if (min_share_ <= 0 || promotions_ < kMinSamples || reads_ < kMinSamples) return false;
  if (share_ >= min_share_) return false;
  return ++skips_ % kExploreEvery != 0;
}

double PrefetchWindow::hidden_share() const {
  MutexLock lock(mu_);
  return share_;
}

uint64_t PrefetchWindow::promotion_ns() const {
  MutexLock lock(mu_);
  return static_cast<uint64_t>(promotion_ns_);
}

}  // namespace tierkv
