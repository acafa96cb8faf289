#include "core/metrics.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <map>

namespace tierkv {

size_t Counter::stripe() {
  static std::atomic<size_t> next{0};
  thread_local size_t mine = next.fetch_add(1, std::memory_order_relaxed) % kStripes;
  return mine;
}

uint64_t Counter::value() const {
  uint64_t total = 0;
  for (const auto& c : cells_) total += c.v.load(std::memory_order_relaxed);
  return total;
}

void Counter::reset() {
  for (auto& c : cells_) c.v.store(0, std::memory_order_relaxed);
}

int Histogram::bucket_of(uint64_t v) {
  constexpr uint64_t kSub = uint64_t{1} << kSubBits;
  if (v < kSub) return static_cast<int>(v);
  int msb = 63 - std::countl_zero(v);  // >= kSubBits
  int shift = msb - kSubBits;
  int sub = static_cast<int>((v >> shift) & (kSub - 1));
  return ((shift + 1) << kSubBits) + sub;
}

uint64_t Histogram::bucket_upper_bound(int b) {
  constexpr uint64_t kSub = uint64_t{1} << kSubBits;
  if (b < static_cast<int>(kSub)) return static_cast<uint64_t>(b);
  int shift = (b >> kSubBits) - 1;
  uint64_t sub = static_cast<uint64_t>(b) & (kSub - 1);
  uint64_t lower = (kSub + sub) << shift;
  return lower + ((uint64_t{1} << shift) - 1);
}

void Histogram::record(uint64_t v) {
  buckets_[bucket_of(v)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  uint64_t prev = max_.load(std::memory_order_relaxed);
  while (v > prev && !max_.compare_exchange_weak(prev, v, std::memory_order_relaxed)) {
  }
}

HistogramSnapshot Histogram::snapshot() const {
  HistogramSnapshot s;
  s.buckets.resize(kBuckets);
  for (int i = 0; i < kBuckets; ++i) {
    s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
    s.count += s.buckets[i];
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  s.max = max_.load(std::memory_order_relaxed);
  return s;
}

void Histogram::reset() {
  for (auto& b : buckets_) b.store(0, std::memory_order_relaxed);
  count_.store(0);
  sum_.store(0);
  max_.store(0);
}

uint64_t HistogramSnapshot::percentile(double q) const {
  if (count == 0) return 0;
  // Nearest rank: the smallest value with at least q of the samples at or
  // below it. The epsilon keeps 0.9 * 10 from rounding up to rank 10.
  uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(count) - 1e-9));
  if (rank < 1) rank = 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    seen += buckets[i];
    if (seen >= rank) {
      uint64_t ub = Histogram::bucket_upper_bound(static_cast<int>(i));
      return ub < max ? ub : max;
    }
  }
  return max;
}

template <typename M>
M& MetricsRegistry::find_or_add(std::deque<Entry<M>>& list, std::string name, std::string help,
                                std::string labels) {
  for (auto& e : list) {
    if (e.name == name && e.labels == labels) return *e.metric;
  }
  list.push_back({std::move(name), std::move(help), std::move(labels), std::make_unique<M>()});
  return *list.back().metric;
}

Counter& MetricsRegistry::counter(std::string name, std::string help, std::string labels) {
  MutexLock lock(mu_);
  return find_or_add(counters_, std::move(name), std::move(help), std::move(labels));
}

Gauge& MetricsRegistry::gauge(std::string name, std::string help, std::string labels,
                              int64_t per_unit) {
  MutexLock lock(mu_);
  Gauge& g = find_or_add(gauges_, std::move(name), std::move(help), std::move(labels));
  for (auto& e : gauges_) {
    if (e.metric.get() == &g) e.per_unit = per_unit > 0 ? per_unit : 1;
  }
  return g;
}

Histogram& MetricsRegistry::latency(std::string name, std::string help, std::string labels) {
  MutexLock lock(mu_);
  return find_or_add(latencies_, std::move(name), std::move(help), std::move(labels));
}

namespace {

std::string with_labels(const std::string& labels, std::string_view extra = {}) {
  if (labels.empty() && extra.empty()) return "";
  std::string out = "{" + labels;
  if (!labels.empty() && !extra.empty()) out += ",";
  out.append(extra);
  return out + "}";
}

// Groups entries by name so that HELP/TYPE appear once per metric family.
template <typename E>
std::map<std::string, std::vector<const E*>> by_family(const std::deque<E>& list) {
  std::map<std::string, std::vector<const E*>> out;
  for (const auto& e : list) out[e.name].push_back(&e);
  return out;
}

}  // namespace

uint64_t MetricsRegistry::add_collector(std::function<void()> fn) {
  MutexLock lock(collectors_mu_);
  uint64_t id = next_collector_++;
  collectors_.emplace(id, std::move(fn));
  return id;
}

void MetricsRegistry::remove_collector(uint64_t id) {
  MutexLock lock(collectors_mu_);
  collectors_.erase(id);
}

void MetricsRegistry::collect() const {
  MutexLock lock(collectors_mu_);
  for (const auto& [id, fn] : collectors_) fn();
}

std::string MetricsRegistry::render_prometheus() const {
  collect();
  MutexLock lock(mu_);
  std::string out;
  for (const auto& [name, entries] : by_family(counters_)) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", name, entries[0]->help, name);
    for (const auto* e : entries)
      out += fmt::format("{}{} {}\n", name, with_labels(e->labels), e->metric->value());
  }
  for (const auto& [name, entries] : by_family(gauges_)) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, entries[0]->help, name);
    for (const auto* e : entries) {
      int64_t v = e->metric->value();
      if (e->per_unit == 1) {
        out += fmt::format("{}{} {}\n", name, with_labels(e->labels), v);
      } else {
        out += fmt::format("{}{} {:.6f}\n", name, with_labels(e->labels),
                           static_cast<double>(v) / static_cast<double>(e->per_unit));
      }
    }
  }
  for (const auto& [name, entries] : by_family(latencies_)) {
    out += fmt::format("# HELP {} {}\n# TYPE {} summary\n", name, entries[0]->help, name);
    for (const auto* e : entries) {
      HistogramSnapshot s = e->metric->snapshot();
      for (double q : {0.5, 0.9, 0.99, 0.999}) {
        out += fmt::format("{}{} {:.9f}\n", name,
                           with_labels(e->labels, fmt::format("quantile=\"{}\"", q)),
                           static_cast<double>(s.percentile(q)) / 1e9);
      }
      out += fmt::format("{}_sum{} {:.9f}\n", name, with_labels(e->labels),
                         static_cast<double>(s.sum) / 1e9);
      out += fmt::format("{}_count{} {}\n", name, with_labels(e->labels), s.count);
    }
  }
  return out;
}

void MetricsRegistry::reset_all() {
  MutexLock lock(mu_);
  for (auto& e : counters_) e.metric->reset();
  for (auto& e : latencies_) e.metric->reset();
}

}  // namespace tierkv
