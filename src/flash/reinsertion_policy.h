// ReinsertionPolicy: which chunks of a region being reclaimed are copied to
// the head of the log instead of dropped. The index offers only chunks read
// since they were written (Navy's hits-based reinsertion); the policy says
// which of those are worth a device read and a write.
//
// Called by the reclaimer thread only, one region at a time: begin_region(),
// then admit() for each candidate before it is read, and copied() for each
// copy made.
#pragma once

#include <algorithm>
#include <cstdint>

#include "flash/flash_index.h"

namespace tierkv::flash {

class ReinsertionPolicy {
 public:
  virtual ~ReinsertionPolicy() = default;
  virtual void begin_region() = 0;
  // Whether `chunk`, of `bytes` on the device, is read back and copied.
  virtual bool admit(const ReinsertCandidate& chunk, uint64_t bytes) const = 0;
  virtual void copied(uint64_t bytes) = 0;
};

// Every chunk read since written, up to a share of the region: a region full
// of hot chunks cannot fill its successor with nothing but copies.
class HitsReinsertionPolicy final : public ReinsertionPolicy {
 public:
  // On the real traces (bench/flash-reclaim) a half and a fifth gave the same
  // flash hit ratios within noise; a fifth writes less.
  static constexpr double kDefaultMaxFraction = 0.2;

  explicit HitsReinsertionPolicy(uint64_t region_size, double max_fraction = kDefaultMaxFraction)
      : budget_(static_cast<uint64_t>(static_cast<double>(region_size) * max_fraction)) {}

  void begin_region() override { left_ = budget_; }
  bool admit(const ReinsertCandidate&, uint64_t bytes) const override { return bytes <= left_; }
  void copied(uint64_t bytes) override { left_ -= std::min(bytes, left_); }

 private:
  const uint64_t budget_;
  uint64_t left_ = 0;
};

}  // namespace tierkv::flash
