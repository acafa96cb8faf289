// Metrics registry: counters, gauges and latency histograms.
//
// The hot path only touches relaxed atomics. Counters are striped over
// cache-line-padded cells chosen per thread, so two I/O threads bumping the
// same counter do not bounce one line. Histograms are log-linear (HDR-style:
// 16 sub-buckets per power of two, <= 6.25% relative error) with one atomic
// per bucket; percentiles are computed only when someone reads them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"

namespace tierkv {

inline constexpr size_t kCacheLine = 64;

class Counter {
 public:
  void add(uint64_t n = 1) { cells_[stripe()].v.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const;
  void reset();

 private:
  static constexpr size_t kStripes = 8;
  struct alignas(kCacheLine) Cell {
    std::atomic<uint64_t> v{0};
  };
  static size_t stripe();
  std::array<Cell, kStripes> cells_;
};

class Gauge {
 public:
  void set(int64_t v) { v_.store(v, std::memory_order_relaxed); }
  void add(int64_t d) { v_.fetch_add(d, std::memory_order_relaxed); }
  int64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

struct HistogramSnapshot {
  uint64_t count = 0;
  uint64_t sum = 0;
  uint64_t max = 0;
  // q in [0, 1]; returns the upper bound of the bucket holding that rank.
  uint64_t percentile(double q) const;
  std::vector<uint64_t> buckets;  // counts, indexed like Histogram buckets
};

class Histogram {
 public:
  static constexpr int kSubBits = 4;  // 16 sub-buckets per octave
  static constexpr int kBuckets = (64 - kSubBits + 1) << kSubBits;

  void record(uint64_t value);
  HistogramSnapshot snapshot() const;
  void reset();

  static int bucket_of(uint64_t value);
  static uint64_t bucket_upper_bound(int bucket);

 private:
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> max_{0};
};

// Owns every metric; hands out stable references. Registration takes a lock,
// recording never does. Names follow Prometheus rules ("tierkv_..._total").
class MetricsRegistry {
 public:
  Counter& counter(std::string name, std::string help, std::string labels = "");
  // A gauge whose value counts 1/per_unit of the unit its name exports (a
  // duration kept in microseconds, exported in seconds: per_unit 1000000).
  Gauge& gauge(std::string name, std::string help, std::string labels = "", int64_t per_unit = 1);
  // Values recorded in nanoseconds; exported in seconds for Prometheus.
  Histogram& latency(std::string name, std::string help, std::string labels = "");

  // Prometheus text exposition format (version 0.0.4).
  std::string render_prometheus() const;
  void reset_all();

  template <typename Fn>  // fn(name, labels, const Counter&)
  void for_each_counter(Fn&& fn) const {
    MutexLock lock(mu_);
    for (const auto& e : counters_) fn(e.name, e.labels, *e.metric);
  }
  template <typename Fn>  // fn(name, labels, const Gauge&, per_unit)
  void for_each_gauge(Fn&& fn) const {
    MutexLock lock(mu_);
    for (const auto& e : gauges_) fn(e.name, e.labels, *e.metric, e.per_unit);
  }
  // A collector refreshes gauges whose values live elsewhere (a subsystem's
  // own counters) just before anyone reads the registry: render_prometheus()
  // and collect() run every collector first. The id removes it again; a
  // collector must be removed before what it reads goes away.
  uint64_t add_collector(std::function<void()> fn);
  void remove_collector(uint64_t id);
  void collect() const;
  template <typename Fn>  // fn(name, labels, const Histogram&)
  void for_each_latency(Fn&& fn) const {
    MutexLock lock(mu_);
    for (const auto& e : latencies_) fn(e.name, e.labels, *e.metric);
  }

 private:
  template <typename M>
  struct Entry {
    std::string name, help, labels;
    std::unique_ptr<M> metric;
    int64_t per_unit = 1;
  };
  template <typename M>
  static M& find_or_add(std::deque<Entry<M>>& list, std::string name, std::string help,
                        std::string labels);

  mutable Mutex collectors_mu_;  // held while collectors run, never with mu_
  std::map<uint64_t, std::function<void()>> collectors_ ABSL_GUARDED_BY(collectors_mu_);
  uint64_t next_collector_ ABSL_GUARDED_BY(collectors_mu_) = 1;
  mutable Mutex mu_;
  std::deque<Entry<Counter>> counters_ ABSL_GUARDED_BY(mu_);
  std::deque<Entry<Gauge>> gauges_ ABSL_GUARDED_BY(mu_);
  std::deque<Entry<Histogram>> latencies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tierkv
