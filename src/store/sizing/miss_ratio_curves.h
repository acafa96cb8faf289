// MissRatioCurves: what hit ratio another size of memory, or of memory and
// flash together, would have given the requests this server saw: one
// online miss-ratio curve for the memory tier and one for memory in front
// of flash, at sizes from a quarter to 8 times the configured ones.
//
// Method: SHARDS spatial sampling (Waldspurger et al., FAST '15). A key is
// in a sample if a hash of it falls under a threshold, so all of a sampled
// key's requests are seen and none of the others'. Each size has its own
// MiniCache, scaled down by its own sampling rate (Waldspurger et al., ATC
// '17, "miniature simulation"), running the memory tier's own eviction
// policy: a small size keeps a high rate, a large one a low rate, and each
// holds about the same number of keys. A curve point is its model's misses,
// each weighed by the inverse of the rate it was sampled at, over all the
// reads (a Horvitz-Thompson estimate, as SHARDS_adj): a sample that
// happened to take more or fewer of the hottest keys than its share, or a
// warm-up seen at a higher rate than the rest, would otherwise skew it.
//
// Bounds: the models hold at most `max_bytes` of DRAM together, each an
// equal share. When one would pass its share its threshold is lowered (its
// rate falls by a quarter) and the keys no longer in its sample leave it.
// A request whose key is in no sample costs one hash mix and a compare,
// without a lock; a sampled one takes the lock and visits the models that
// sample it.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/metrics.h"
#include "core/mutex.h"
#include "memory/policy/eviction_policy.h"
#include "store/sizing/mini_cache.h"

namespace tierkv {

struct SizingOptions {
  double sample_rate = 1.0;  // the starting rate; 0 turns the curves off
  uint64_t max_bytes = 1 << 20;
  uint64_t memory_bytes = 0;
  uint64_t flash_bytes = 0;  // 0: no memory-and-flash curve
  memory::PolicyKind policy = memory::PolicyKind::kS3Fifo;
};

class MissRatioCurves {
 public:
  // The sizes of each curve, as multiples of the configured size.
  static constexpr double kScales[] = {0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 5, 6, 8};
  static constexpr size_t kPoints = std::size(kScales);

  explicit MissRatioCurves(const SizingOptions& options);
  MissRatioCurves(const MissRatioCurves&) = delete;
  MissRatioCurves& operator=(const MissRatioCurves&) = delete;

  bool enabled() const { return enabled_; }
  // Whether some model samples the key: callers check it before they work
  // out what the object costs (most keys are in no sample).
  bool samples(uint64_t key_hash) const { return enabled_ && sampled(mix(key_hash)); }
  // The requests, by the key's 64-bit hash and what the object costs the
  // memory tier. A read is a hit or a miss; a write stores a new version.
  void read(uint64_t key_hash, uint64_t bytes);
  void write(uint64_t key_hash, uint64_t bytes);
  void remove(uint64_t key_hash);

  struct Point {
    double scale = 0;
    uint64_t size_bytes = 0;
    double miss_ratio = 0;  // of the sampled reads; 1 before any
    // The model of this size has evicted: below its size, the curve is
    // not just cold misses (a working set still growing looks flat).
    bool filled = false;
    // How far, as a share of size_bytes, the size this point really models
    // may lie from size_bytes (two standard deviations): the model holds a
    // sample of k keys of the working set of this size, and a sample's
    // share of a set is off by sqrt((1 - rate) / k) of itself. 0 at rate 1.
    // A curve that falls steeply within that span (a loop just larger than
    // the cache) can be off by the whole fall at this point.
    double size_error = 0;
  };
  struct Curves {
    std::vector<Point> memory;
    std::vector<Point> tiered;   // empty without flash
    double sample_rate = 0;      // the largest memory model's, the lowest
    uint64_t sampled_reads = 0;  // reads of keys some model samples
    uint64_t sampled_keys = 0;   // entries in the largest memory model
    uint64_t model_bytes = 0;    // DRAM the models take, about
    uint64_t resamples = 0;      // times a model's rate was lowered
  };
  Curves curves() const;

 private:
  struct Model {
    double scale = 1;
    uint64_t memory_bytes = 0;  // the sizes it models, unscaled
    uint64_t flash_bytes = 0;
    double rate = 1;
    uint64_t threshold = UINT64_MAX;
    // Each miss weighs the inverse of the rate it was sampled at: their
    // sum estimates the misses of all reads, also across changes of rate.
    double weighted_misses = 0;
    std::unique_ptr<MiniCache> cache;
  };
  // The key's place in the hash space (mixed: the store's key hash also
  // picks shards); a model samples it if it is under the model's threshold.
  static uint64_t mix(uint64_t key_hash);
  // Some model samples it (the highest threshold).
  bool sampled(uint64_t point) const { return point < threshold_.load(std::memory_order_relaxed); }
  Model make_model(double scale, uint64_t memory_bytes, uint64_t flash_bytes) const;
  // Lowers the model's rate until it fits its share of max_bytes.
  void fit(Model& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void fit_all() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void publish_threshold() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  template <typename Fn>
  void for_each_model(Fn fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t entries() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<Point> points(const std::vector<Model>& models) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SizingOptions options_;
  const bool enabled_;
  const size_t bytes_per_entry_;
  size_t entries_per_model_ = 0;  // each model's share of max_bytes
  std::atomic<uint64_t> threshold_{0};
  Counter all_reads_;  // sampled or not
  mutable Mutex mu_;
  uint64_t sampled_reads_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t resamples_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Model> memory_ ABSL_GUARDED_BY(mu_);
  std::vector<Model> tiered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tierkv
