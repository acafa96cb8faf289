#include "core/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace tierkv {
namespace {

TEST(CounterTest, StripedCellsSumAcrossThreads) {
  // One cache line per stripe is what keeps threads from sharing a line.
  static_assert(sizeof(Counter) >= 8 * kCacheLine);
  Counter c;
  constexpr int kThreads = 8, kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) c.add();
    });
  for (auto& t : threads) t.join();
  c.add(5);
  EXPECT_EQ(c.value(), uint64_t{kThreads} * kPerThread + 5);
  c.reset();
  EXPECT_EQ(c.value(), 0u);
}

TEST(GaugeTest, SetAndAdd) {
  Gauge g;
  g.set(10);
  g.add(-3);
  EXPECT_EQ(g.value(), 7);
}

TEST(HistogramTest, BucketsBoundRelativeError) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100000; ++i) {
    uint64_t v = rng() >> (rng() % 64);
    int b = Histogram::bucket_of(v);
    ASSERT_GE(b, 0);
    ASSERT_LT(b, Histogram::kBuckets);
    uint64_t ub = Histogram::bucket_upper_bound(b);
    ASSERT_GE(ub, v);
    // Values below 16 are exact; above, a bucket spans 1/16 of its octave.
    ASSERT_LE(static_cast<double>(ub - v), static_cast<double>(v) / 16.0) << v;
    if (b > 0) {
      ASSERT_LT(Histogram::bucket_upper_bound(b - 1), v) << v;
    }
  }
  EXPECT_EQ(Histogram::bucket_of(UINT64_MAX), Histogram::kBuckets - 1);
  EXPECT_EQ(Histogram::bucket_upper_bound(Histogram::kBuckets - 1), UINT64_MAX);
}

TEST(HistogramTest, SmallValuesAreExact) {
  Histogram h;
  for (uint64_t v = 1; v <= 10; ++v) h.record(v);
  HistogramSnapshot s = h.snapshot();
  EXPECT_EQ(s.count, 10u);
  EXPECT_EQ(s.sum, 55u);
  EXPECT_EQ(s.max, 10u);
  EXPECT_EQ(s.percentile(0.5), 5u);
  EXPECT_EQ(s.percentile(0.9), 9u);
  EXPECT_EQ(s.percentile(0.99), 10u);
  EXPECT_EQ(s.percentile(1.0), 10u);
  EXPECT_EQ(s.percentile(0.0), 1u);
}

TEST(HistogramTest, PercentilesWithinBucketError) {
  Histogram h;
  // A shuffled uniform 1..100000 ns: percentile q is q * 100000 exactly.
  std::vector<uint64_t> values(100000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = i + 1;
  std::shuffle(values.begin(), values.end(), std::mt19937_64(7));
  for (uint64_t v : values) h.record(v);
  HistogramSnapshot s = h.snapshot();
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    double exact = q * 100000;
    double got = static_cast<double>(s.percentile(q));
    EXPECT_GE(got, exact) << q;  // an upper bound of the bucket holding the rank
    EXPECT_LE(got, exact * (1 + 1.0 / 16)) << q;
  }
  EXPECT_EQ(s.percentile(1.0), 100000u);  // clipped to the true max
}

TEST(HistogramTest, SkewedTailIsSeen) {
  Histogram h;
  for (int i = 0; i < 9990; ++i) h.record(1000);
  for (int i = 0; i < 10; ++i) h.record(5000000);
  HistogramSnapshot s = h.snapshot();
  EXPECT_LE(s.percentile(0.99), 1000 * 17 / 16);
  EXPECT_GE(s.percentile(0.999), 1000u);
  EXPECT_LE(s.percentile(0.999), 1000 * 17 / 16);  // rank 9990 is still 1000
  EXPECT_GE(s.percentile(0.9995), 5000000u * 15 / 16);
  h.reset();
  EXPECT_EQ(h.snapshot().count, 0u);
  EXPECT_EQ(h.snapshot().percentile(0.5), 0u);
}

TEST(MetricsRegistryTest, SameNameAndLabelsIsTheSameMetric) {
  MetricsRegistry r;
  Counter& a = r.counter("tierkv_ops_total", "ops", "op=\"get\"");
  Counter& b = r.counter("tierkv_ops_total", "ops", "op=\"get\"");
  Counter& c = r.counter("tierkv_ops_total", "ops", "op=\"set\"");
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
}

TEST(MetricsRegistryTest, RendersPrometheusText) {
  MetricsRegistry r;
  r.counter("tierkv_ops_total", "operations", "op=\"get\"").add(3);
  r.counter("tierkv_ops_total", "operations", "op=\"set\"").add(2);
  r.gauge("tierkv_memory_used_bytes", "bytes in use").set(1234);
  Histogram& lat = r.latency("tierkv_get_seconds", "get latency");
  for (int i = 0; i < 100; ++i) lat.record(1000);  // 1 us
  std::string text = r.render_prometheus();

  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("# HELP tierkv_ops_total operations\n"), 1u);
  EXPECT_EQ(count("# TYPE tierkv_ops_total counter\n"), 1u);
  EXPECT_EQ(count("tierkv_ops_total{op=\"get\"} 3\n"), 1u);
  EXPECT_EQ(count("tierkv_ops_total{op=\"set\"} 2\n"), 1u);
  EXPECT_EQ(count("# TYPE tierkv_memory_used_bytes gauge\n"), 1u);
  EXPECT_EQ(count("tierkv_memory_used_bytes 1234\n"), 1u);
  EXPECT_EQ(count("# TYPE tierkv_get_seconds summary\n"), 1u);
  EXPECT_EQ(count("tierkv_get_seconds{quantile=\"0.5\"} 0.000001000\n"), 1u);
  EXPECT_EQ(count("tierkv_get_seconds{quantile=\"0.999\"} 0.000001000\n"), 1u);
  EXPECT_EQ(count("tierkv_get_seconds_sum 0.000100000\n"), 1u);
  EXPECT_EQ(count("tierkv_get_seconds_count 100\n"), 1u);
  EXPECT_EQ(text.back(), '\n');

  r.reset_all();
  text = r.render_prometheus();
  EXPECT_EQ(count("tierkv_ops_total{op=\"get\"} 0\n"), 1u);
  EXPECT_EQ(count("tierkv_get_seconds_count 0\n"), 1u);
}

TEST(MetricsRegistryTest, GaugeInSubunitsRendersInTheUnitOfItsName) {
  MetricsRegistry r;
  // Kept in microseconds, exported in seconds.
  r.gauge("tierkv_recovery_duration_seconds", "recovery time", "", 1000000).set(2500001);
  r.gauge("tierkv_plain", "plain").set(-7);
  std::string text = r.render_prometheus();
  EXPECT_NE(text.find("tierkv_recovery_duration_seconds 2.500001\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tierkv_plain -7\n"), std::string::npos) << text;
}

TEST(MetricsRegistryTest, ForEachVisitsEveryCounter) {
  MetricsRegistry r;
  r.counter("a_total", "a").add(1);
  r.counter("b_total", "b").add(2);
  uint64_t sum = 0;
  int n = 0;
  r.for_each_counter([&](const std::string&, const std::string&, const Counter& c) {
    sum += c.value();
    ++n;
  });
  EXPECT_EQ(n, 2);
  EXPECT_EQ(sum, 3u);
}

}  // namespace
}  // namespace tierkv
