// ReinsertionPolicy: which chunks of a region being reclaimed are copied to
// the head of the log instead of dropped. The index offers only chunks read
// since they were written (Navy's hits-based reinsertion); the policy says
// which of those are worth a device read and a write.
//
// Called by the reclaimer thread only, one region at a time: begin_region()
// with what the reclaimed region's chunks did, then admit() for each
// candidate before it is read, and copied() for each copy made. evidence()
// may be read from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "flash/flash_index.h"

namespace tierkv::flash {

class ReinsertionPolicy {
 public:
  // What the policy has learnt: the share of fresh chunks and of copies read
  // during their stay on flash, and whether it copies its full share now.
  struct Evidence {
    double fresh_read_share = 0;
    double copies_read_share = 0;
    bool copying = true;
  };

  virtual ~ReinsertionPolicy() = default;
  virtual void begin_region(const RegionYield& reclaimed) = 0;
  // Whether `chunk`, of `bytes` on the device, is read back and copied.
  virtual bool admit(const ReinsertCandidate& chunk, uint64_t bytes) const = 0;
  virtual void copied(uint64_t bytes) = 0;
  virtual Evidence evidence() const = 0;
};

// Every chunk read since written, up to a share of the region, while copies
// earn the space they take; otherwise a small probe share, which keeps the
// evidence current.
//
// Why it adapts: a copy takes the place of the oldest records, so it costs
// the reads those would have had in the time it adds to the FIFO window.
// On key-value traces a chunk read on flash is read again there more often
// than a fresh chunk is read at all, and copies raised the flash hit ratio
// by up to 1.29x; on a block trace where a re-read block is rarely read a
// third time (cloudPhysics), copying every read chunk cost a third of the
// flash hits at 2x flash (bench/flash-reclaim). The evidence is what the
// reclaimed regions report: the share of copies read during their stay
// against the share of fresh chunks read during theirs. While copies are
// read at least as often, a copy is worth at least the reads it pushes
// out, as long as a record's chance of a read falls with its age.
class HitsReinsertionPolicy final : public ReinsertionPolicy {
 public:
  // On the real traces (bench/flash-reclaim), a tenth kept about two thirds
  // of a fifth's extra flash hits at half its extra writes (write
  // amplification 1.30 against 1.35 with churn at 8x flash).
  static constexpr double kDefaultMaxFraction = 0.1;
  // The share copied while copies do not pay.
  static constexpr double kProbeFraction = 0.02;
  // Evidence fades by this factor with every region reclaimed after it.
  static constexpr double kKeep = 31.0 / 32.0;
  // Copies seen before they are judged: until then the full share is copied.
  static constexpr double kMinCopies = 32;

  explicit HitsReinsertionPolicy(uint64_t region_size, double max_fraction = kDefaultMaxFraction)
      : budget_(share_of(region_size, max_fraction)),
        probe_(share_of(region_size, std::min(max_fraction, kProbeFraction))) {}

  void begin_region(const RegionYield& reclaimed) override;
  // The first copy of a region fits whatever its size: a share smaller than
  // one chunk (large chunks, small regions) still keeps one.
  bool admit(const ReinsertCandidate&, uint64_t bytes) const override {
    return bytes <= left_ || !copied_any_;
  }
  void copied(uint64_t bytes) override {
    left_ -= std::min(bytes, left_);
    copied_any_ = true;
  }
  Evidence evidence() const override;

 private:
  static uint64_t share_of(uint64_t region_size, double fraction) {
    return static_cast<uint64_t>(static_cast<double>(region_size) * fraction);
  }

  const uint64_t budget_;
  const uint64_t probe_;
  uint64_t left_ = 0;
  bool copied_any_ = false;  // in this region
  // Faded counts of the regions reclaimed so far (RegionYield's fields).
  double fresh_ = 0;
  double fresh_read_ = 0;
  double copies_ = 0;
  double copies_read_ = 0;
  // evidence() for other threads, in millionths.
  std::atomic<uint32_t> fresh_share_ppm_{0};
  std::atomic<uint32_t> copies_share_ppm_{0};
  std::atomic<bool> copying_{true};
};

}  // namespace tierkv::flash
