#include "store/sizing/miss_ratio_curves.h"

#include <algorithm>
#include <cmath>

namespace tierkv {
namespace {

uint64_t threshold_for(double rate) {
  if (rate >= 1.0) return UINT64_MAX;
  return static_cast<uint64_t>(std::ldexp(rate, 64));
}

double size_error(double rate, size_t keys) {
  if (rate >= 1.0) return 0;
  return 2.0 * std::sqrt((1.0 - rate) / static_cast<double>(std::max<size_t>(keys, 1)));
}

}  // namespace

MissRatioCurves::MissRatioCurves(const SizingOptions& options)
    : options_(options),
      enabled_(options.sample_rate > 0 && options.memory_bytes > 0 && options.max_bytes > 0),
      bytes_per_entry_(MiniCache::bytes_per_entry(options.policy)) {
  if (!enabled_) return;
  const size_t models = kPoints * (options.flash_bytes > 0 ? 2 : 1);
  entries_per_model_ = std::max<size_t>(1, options.max_bytes / bytes_per_entry_ / models);
  MutexLock lock(mu_);
  for (double scale : kScales) {
    const auto memory = static_cast<uint64_t>(static_cast<double>(options.memory_bytes) * scale);
    const auto flash = static_cast<uint64_t>(static_cast<double>(options.flash_bytes) * scale);
    memory_.push_back(make_model(scale, memory, 0));
    if (options.flash_bytes > 0) tiered_.push_back(make_model(scale, memory, flash));
  }
  publish_threshold();
}

MissRatioCurves::Model MissRatioCurves::make_model(double scale, uint64_t memory_bytes,
                                                   uint64_t flash_bytes) const {
  Model m;
  m.scale = scale;
  m.memory_bytes = memory_bytes;
  m.flash_bytes = flash_bytes;
  m.rate = std::min(options_.sample_rate, 1.0);
  m.threshold = threshold_for(m.rate);
  m.cache = std::make_unique<MiniCache>(
      options_.policy, static_cast<uint64_t>(static_cast<double>(memory_bytes) * m.rate),
      static_cast<uint64_t>(static_cast<double>(flash_bytes) * m.rate));
  return m;
}

uint64_t MissRatioCurves::mix(uint64_t key_hash) {
  // splitmix64's finalizer.
  uint64_t z = key_hash + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

template <typename Fn>
void MissRatioCurves::for_each_model(Fn fn) {
  for (Model& m : memory_) fn(m);
  for (Model& m : tiered_) fn(m);
}

void MissRatioCurves::publish_threshold() {
  uint64_t highest = 0;
  for_each_model([&](Model& m) { highest = std::max(highest, m.threshold); });
  threshold_.store(highest, std::memory_order_relaxed);
}

void MissRatioCurves::read(uint64_t key_hash, uint64_t bytes) {
  if (!enabled_) return;
  all_reads_.add();
  const uint64_t point = mix(key_hash);
  if (!sampled(point)) return;
  const auto size = static_cast<uint32_t>(std::min<uint64_t>(bytes, UINT32_MAX));
  MutexLock lock(mu_);
  ++sampled_reads_;
  bool grew = false;
  for_each_model([&](Model& m) {
    if (point >= m.threshold) return;
    if (!m.cache->read(point, size)) m.weighted_misses += 1.0 / m.rate;
    grew = grew || m.cache->entries() > entries_per_model_;
  });
  if (grew) fit_all();
}

void MissRatioCurves::write(uint64_t key_hash, uint64_t bytes) {
  const uint64_t point = mix(key_hash);
  if (!enabled_ || !sampled(point)) return;
  const auto size = static_cast<uint32_t>(std::min<uint64_t>(bytes, UINT32_MAX));
  MutexLock lock(mu_);
  bool grew = false;
  for_each_model([&](Model& m) {
    if (point >= m.threshold) return;
    m.cache->write(point, size);
    grew = grew || m.cache->entries() > entries_per_model_;
  });
  if (grew) fit_all();
}

void MissRatioCurves::remove(uint64_t key_hash) {
  const uint64_t point = mix(key_hash);
  if (!enabled_ || !sampled(point)) return;
  MutexLock lock(mu_);
  for_each_model([&](Model& m) {
    if (point < m.threshold) m.cache->remove(point);
  });
}

size_t MissRatioCurves::entries() const {
  size_t n = 0;
  for (const std::vector<Model>* models : {&memory_, &tiered_})
    for (const Model& m : *models) n += m.cache->entries();
  return n;
}

void MissRatioCurves::fit_all() {
  for (Model& m : memory_) fit(m);
  for (Model& m : tiered_) fit(m);
}

void MissRatioCurves::fit(Model& m) {
  // Fixed-size SHARDS, per model: lower its rate until it fits its share.
  bool lowered = false;
  while (m.cache->entries() > entries_per_model_ && m.rate > 1e-9) {
    m.rate *= 0.75;
    m.threshold = threshold_for(m.rate);
    ++resamples_;
    lowered = true;
    const uint64_t threshold = m.threshold;
    m.cache->resample([threshold](uint64_t point) { return point < threshold; },
                      static_cast<uint64_t>(static_cast<double>(m.memory_bytes) * m.rate),
                      static_cast<uint64_t>(static_cast<double>(m.flash_bytes) * m.rate));
  }
  if (lowered) publish_threshold();
}

std::vector<MissRatioCurves::Point> MissRatioCurves::points(
    const std::vector<Model>& models) const {
  std::vector<Point> out;
  const auto reads = static_cast<double>(all_reads_.value());
  for (const Model& m : models) {
    Point p;
    p.scale = m.scale;
    p.size_bytes = m.memory_bytes + m.flash_bytes;
    p.miss_ratio = reads <= 0 ? 1.0 : std::min(1.0, m.weighted_misses / reads);
    p.filled = m.cache->filled();
    p.size_error = size_error(m.rate, m.cache->keys());
    out.push_back(p);
  }
  return out;
}

MissRatioCurves::Curves MissRatioCurves::curves() const {
  Curves c;
  if (!enabled_) return c;
  MutexLock lock(mu_);
  c.memory = points(memory_);
  c.tiered = points(tiered_);
  c.sample_rate = memory_.back().rate;
  c.sampled_reads = sampled_reads_;
  c.sampled_keys = memory_.back().cache->entries();
  c.model_bytes = entries() * bytes_per_entry_;
  c.resamples = resamples_;
  return c;
}

}  // namespace tierkv
