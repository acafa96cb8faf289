// MissRatioCurves against the exact answer: the same mini cache model fed
// every request at full size. Contract: at every size from 0.25x to 8x, the
// sampled curve is within 0.03 of the exact one; the models stay within
// max_bytes (dead flash log records included), lowering the rate as they
// must; a removed key reads as a miss.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/hash.h"
#include "store/sizing/miss_ratio_curves.h"

namespace tierkv {
namespace {

constexpr uint64_t kObjectBytes = 200;

// Zipf(alpha) ids over `keys`, seeded: a cache trace with a hot head and a
// long tail.
std::vector<uint64_t> zipf_trace(size_t keys, size_t requests, double alpha, uint64_t seed) {
  std::vector<double> cdf(keys);
  double sum = 0;
  for (size_t i = 0; i < keys; ++i)
    cdf[i] = sum += 1.0 / std::pow(static_cast<double>(i + 1), alpha);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, sum);
  std::vector<uint64_t> out;
  out.reserve(requests);
  for (size_t r = 0; r < requests; ++r)
    out.push_back(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
  return out;
}

uint64_t key_hash(uint64_t id) {
  return hash64(std::string_view(reinterpret_cast<const char*>(&id), sizeof(id)));
}

// A look-aside client's requests: each a read, and a write (the fill)
// after the real cache (memory at 1x) missed.
struct Request {
  uint64_t id;
  bool fill;
};
std::vector<Request> look_aside(const std::vector<uint64_t>& trace, const SizingOptions& o) {
  MiniCache real(o.policy, o.memory_bytes, o.flash_bytes);
  std::vector<Request> out;
  for (uint64_t id : trace) out.push_back({id, !real.read(id, kObjectBytes)});
  return out;
}

// The exact miss ratio: a full-size model fed every request.
double exact_miss_ratio(const std::vector<Request>& requests, memory::PolicyKind policy,
                        uint64_t memory_bytes, uint64_t flash_bytes) {
  MiniCache cache(policy, memory_bytes, flash_bytes);
  uint64_t misses = 0;
  for (const Request& r : requests) {
    if (!cache.read(r.id, kObjectBytes)) ++misses;
    if (r.fill) cache.write(r.id, kObjectBytes);
  }
  return static_cast<double>(misses) / static_cast<double>(requests.size());
}

MissRatioCurves::Curves sampled_curves(const std::vector<Request>& requests,
                                       const SizingOptions& options) {
  MissRatioCurves curves(options);
  for (const Request& r : requests) {
    curves.read(key_hash(r.id), kObjectBytes);
    if (r.fill) curves.write(key_hash(r.id), kObjectBytes);
  }
  return curves.curves();
}

void expect_close_to_exact(const std::vector<uint64_t>& trace, memory::PolicyKind policy) {
  SizingOptions o;
  o.sample_rate = 0.1;
  o.max_bytes = 64 << 20;  // no resampling here
  o.memory_bytes = 4000 * kObjectBytes;
  o.flash_bytes = 3 * o.memory_bytes;
  o.policy = policy;
  const std::vector<Request> requests = look_aside(trace, o);
  const MissRatioCurves::Curves c = sampled_curves(requests, o);
  ASSERT_EQ(c.memory.size(), MissRatioCurves::kPoints);
  ASSERT_EQ(c.tiered.size(), MissRatioCurves::kPoints);
  EXPECT_EQ(c.resamples, 0u);
  for (size_t i = 0; i < MissRatioCurves::kPoints; ++i) {
    const double scale = MissRatioCurves::kScales[i];
    const auto memory = static_cast<uint64_t>(static_cast<double>(o.memory_bytes) * scale);
    const auto flash = static_cast<uint64_t>(static_cast<double>(o.flash_bytes) * scale);
    EXPECT_NEAR(c.memory[i].miss_ratio, exact_miss_ratio(requests, policy, memory, 0), 0.03)
        << policy_name(policy) << " memory at " << scale << "x";
    EXPECT_NEAR(c.tiered[i].miss_ratio, exact_miss_ratio(requests, policy, memory, flash), 0.03)
        << policy_name(policy) << " memory and flash at " << scale << "x";
    EXPECT_EQ(c.memory[i].size_bytes, memory);
    EXPECT_EQ(c.tiered[i].size_bytes, memory + flash);
  }
  // More room never misses more, beyond the sample's noise.
  for (size_t i = 1; i < MissRatioCurves::kPoints; ++i)
    EXPECT_LE(c.memory[i].miss_ratio, c.memory[i - 1].miss_ratio + 0.01);
}

TEST(MissRatioCurvesTest, SampledCurvesMatchTheExactOnesForEachPolicy) {
  const std::vector<uint64_t> trace = zipf_trace(150000, 400000, 0.9, 1);
  for (memory::PolicyKind policy : {memory::PolicyKind::kS3Fifo, memory::PolicyKind::kLru})
    expect_close_to_exact(trace, policy);
}

TEST(MissRatioCurvesTest, ModelsStayWithinTheirBoundByLoweringTheRate) {
  const std::vector<uint64_t> trace = zipf_trace(200000, 200000, 0.6, 2);
  SizingOptions o;
  o.sample_rate = 0.5;
  o.max_bytes = 256 << 10;
  o.memory_bytes = 20000 * kObjectBytes;
  o.flash_bytes = 2 * o.memory_bytes;
  MissRatioCurves curves(o);
  for (uint64_t id : trace) {
    curves.read(key_hash(id), kObjectBytes);
    curves.write(key_hash(id), kObjectBytes);
  }
  const MissRatioCurves::Curves c = curves.curves();
  EXPECT_GT(c.resamples, 0u);
  EXPECT_LT(c.sample_rate, 0.5);
  EXPECT_LE(c.model_bytes, o.max_bytes);
  EXPECT_GT(c.sampled_reads, 0u);
  for (const auto& p : c.memory) {
    EXPECT_GE(p.miss_ratio, 0.0);
    EXPECT_LE(p.miss_ratio, 1.0);
    // A sample of a few hundred keys places its size within some percent.
    EXPECT_GT(p.size_error, 0.01) << p.scale;
    EXPECT_LT(p.size_error, 0.5) << p.scale;
  }
}

TEST(MissRatioCurvesTest, ARemovedKeyIsAMissAtEverySize) {
  SizingOptions o;
  o.sample_rate = 1.0;
  o.memory_bytes = 100 * kObjectBytes;
  o.flash_bytes = 100 * kObjectBytes;
  MissRatioCurves curves(o);
  curves.write(key_hash(7), kObjectBytes);
  curves.read(key_hash(7), kObjectBytes);  // a hit everywhere
  curves.remove(key_hash(7));
  curves.read(key_hash(7), kObjectBytes);  // a miss everywhere
  const MissRatioCurves::Curves c = curves.curves();
  EXPECT_EQ(c.sampled_reads, 2u);
  for (const auto& p : c.memory) EXPECT_DOUBLE_EQ(p.miss_ratio, 0.5) << p.scale;
  for (const auto& p : c.memory) EXPECT_EQ(p.size_error, 0) << p.scale;  // every key sampled
  for (const auto& p : c.tiered) EXPECT_DOUBLE_EQ(p.miss_ratio, 0.5) << p.scale;
  EXPECT_FALSE(c.memory.back().filled);
}

TEST(MissRatioCurvesTest, OffAtRateZero) {
  SizingOptions o;
  o.sample_rate = 0;
  o.memory_bytes = 1 << 20;
  MissRatioCurves curves(o);
  curves.write(key_hash(1), kObjectBytes);
  curves.read(key_hash(1), kObjectBytes);
  EXPECT_FALSE(curves.enabled());
  EXPECT_TRUE(curves.curves().memory.empty());
}

// The flash level holds what memory evicted: a key pushed out of a small
// memory still hits in the memory-and-flash model, and misses in memory.
TEST(MissRatioCurvesTest, FlashKeepsWhatMemoryEvicted) {
  MiniCache cache(memory::PolicyKind::kLru, 2 * kObjectBytes, 4 * kObjectBytes);
  for (uint64_t id = 0; id < 4; ++id) cache.write(id, kObjectBytes);
  EXPECT_TRUE(cache.filled() == false);
  EXPECT_TRUE(cache.read(0, kObjectBytes));  // on flash
  MiniCache memory_only(memory::PolicyKind::kLru, 2 * kObjectBytes, 0);
  for (uint64_t id = 0; id < 4; ++id) memory_only.write(id, kObjectBytes);
  EXPECT_TRUE(memory_only.filled());
  EXPECT_FALSE(memory_only.read(0, kObjectBytes));
  // A new version makes the flash copy stale.
  cache.write(1, kObjectBytes);
  cache.remove(1);
  EXPECT_FALSE(cache.read(1, kObjectBytes));
}

// Rewriting a few keys through a small memory into a large flash leaves a
// dead log record per copy: the records count toward the model's entries,
// and so toward mrc-max-bytes, though only a few keys are live.
TEST(MissRatioCurvesTest, DeadFlashRecordsCountTowardTheBound) {
  MiniCache cache(memory::PolicyKind::kLru, kObjectBytes, 100000 * kObjectBytes);
  for (int round = 0; round < 1000; ++round)
    for (uint64_t id = 0; id < 3; ++id) cache.write(id, kObjectBytes);
  EXPECT_GT(cache.entries(), 2900u);  // one record per eviction of a new version

  SizingOptions o;
  o.sample_rate = 1.0;
  o.max_bytes = 64 << 10;
  o.memory_bytes = kObjectBytes;
  o.flash_bytes = 100000 * kObjectBytes;
  MissRatioCurves curves(o);
  for (int round = 0; round < 20000; ++round)
    for (uint64_t id = 0; id < 3; ++id) curves.write(key_hash(id), kObjectBytes);
  const MissRatioCurves::Curves c = curves.curves();
  EXPECT_GT(c.resamples, 0u);
  EXPECT_LE(c.model_bytes, o.max_bytes);
}

}  // namespace
}  // namespace tierkv
