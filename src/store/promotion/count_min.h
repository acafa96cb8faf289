// CountMinSketch: approximate access counts for promotion admission.
//
// Four rows of 8-bit counters (at least 64 per row, a power of two). Each
// row remixes the key's 64-bit hash with its own odd multiplier, so the rows
// collide independently; the estimate is the minimum over the rows.
// Counters saturate at 255, and increments racing on one counter may lose
// one (an under-count, harmless for admission). Counters age: after
// `width * 8` increments every counter is halved, so the sketch follows the
// recent working set instead of all history (as in TinyLFU).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace tierkv {

class CountMinSketch {
 public:
  // width is rounded up to a power of two.
  explicit CountMinSketch(size_t width);
  // Adds one access; returns the new estimate.
  uint32_t increment(uint64_t hash);
  uint32_t estimate(uint64_t hash) const;
  size_t width() const { return width_; }

 private:
  static constexpr int kRows = 4;
  size_t slot(int row, uint64_t hash) const;
  void age();

  size_t width_;
  std::unique_ptr<std::atomic<uint8_t>[]> counters_;  // kRows * width_
  std::atomic<uint64_t> increments_{0};
  uint64_t age_every_;
};

}  // namespace tierkv
