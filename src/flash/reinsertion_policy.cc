#include "flash/reinsertion_policy.h"

namespace tierkv::flash {

namespace {

uint32_t share_ppm(double part, double whole) {
  return whole > 0 ? static_cast<uint32_t>(part / whole * 1e6) : 0;
}

}  // namespace

void HitsReinsertionPolicy::begin_region(const RegionYield& reclaimed) {
  fresh_ = fresh_ * kKeep + static_cast<double>(reclaimed.fresh);
  fresh_read_ = fresh_read_ * kKeep + static_cast<double>(reclaimed.fresh_read);
  copies_ = copies_ * kKeep + static_cast<double>(reclaimed.copies);
  copies_read_ = copies_read_ * kKeep + static_cast<double>(reclaimed.copies_read);
  // Cross-multiplied: copies_read_ / copies_ >= fresh_read_ / fresh_.
  const bool copying = copies_ < kMinCopies || copies_read_ * fresh_ >= fresh_read_ * copies_;
  left_ = copying ? budget_ : probe_;
  copied_any_ = false;
  fresh_share_ppm_.store(share_ppm(fresh_read_, fresh_), std::memory_order_relaxed);
  copies_share_ppm_.store(share_ppm(copies_read_, copies_), std::memory_order_relaxed);
  copying_.store(copying, std::memory_order_relaxed);
}

ReinsertionPolicy::Evidence HitsReinsertionPolicy::evidence() const {
  return {fresh_share_ppm_.load(std::memory_order_relaxed) / 1e6,
          copies_share_ppm_.load(std::memory_order_relaxed) / 1e6,
          copying_.load(std::memory_order_relaxed)};
}

}  // namespace tierkv::flash
