#include "store/promotion/count_min.h"

#include <algorithm>
#include <bit>

namespace tierkv {

CountMinSketch::CountMinSketch(size_t width)
    : width_(std::bit_ceil(std::max<size_t>(width, 64))),
      counters_(new std::atomic<uint8_t>[kRows * width_]),
      age_every_(width_ * 8) {
  for (size_t i = 0; i < kRows * width_; ++i) counters_[i].store(0, std::memory_order_relaxed);
}

size_t CountMinSketch::slot(int row, uint64_t hash) const {
  // Each row remixes the hash with its own odd multiplier, so rows collide
  // independently even though they share one hash.
  static constexpr uint64_t kMix[kRows] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full,
                                           0x165667B19E3779F9ull, 0xD6E8FEB86659FD93ull};
  uint64_t h = (hash ^ (hash >> 29)) * kMix[row];
  return size_t(row) * width_ + (h >> 32) % width_;
}

uint32_t CountMinSketch::increment(uint64_t hash) {
  uint32_t est = UINT32_MAX;
  for (int r = 0; r < kRows; ++r) {
    std::atomic<uint8_t>& c = counters_[slot(r, hash)];
    uint8_t v = c.load(std::memory_order_relaxed);
    // A lost update under a race only under-counts by one: fine for a filter.
    if (v < 255) c.store(++v, std::memory_order_relaxed);
    est = std::min<uint32_t>(est, v);
  }
  if (increments_.fetch_add(1, std::memory_order_relaxed) + 1 == age_every_) age();
  return est;
}

uint32_t CountMinSketch::estimate(uint64_t hash) const {
  uint32_t est = UINT32_MAX;
  for (int r = 0; r < kRows; ++r)
    est = std::min<uint32_t>(est, counters_[slot(r, hash)].load(std::memory_order_relaxed));
  return est;
}

void CountMinSketch::age() {
  for (size_t i = 0; i < kRows * width_; ++i) {
    uint8_t v = counters_[i].load(std::memory_order_relaxed);
    counters_[i].store(static_cast<uint8_t>(v >> 1), std::memory_order_relaxed);
  }
  increments_.store(0, std::memory_order_relaxed);
}

}  // namespace tierkv
