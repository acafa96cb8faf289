// tierkv-loadgen: a closed-loop cache workload over RESP or memcached's text
// protocol, so tierkv and memcached are driven by the same program.
//
// Phases: load (every key once, in key order), warm (zipfian mix, not
// measured), measure (zipfian mix until --ops or --seconds). Each operation is
// a GET (a miss is filled with a SET, as a cache user would) or a SET of a new
// version. Every GET hit is checked byte for byte. The result is one JSON
// object on stdout; progress goes to stderr.
#include <sys/resource.h>

#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache_client.h"
#include "core/metrics.h"
#include "fmt/format.h"
#include "workload.h"

namespace tierkv::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string protocol = "resp";
  size_t connections = 8;
  size_t keys = 4000;
  size_t min_value = 16 << 10;
  size_t max_value = 512 << 10;
  double zipf_theta = 0.99;
  double get_fraction = 0.9;
  uint64_t ops = 20000;
  double seconds = 60;
  uint64_t warm_ops = 2000;
  bool skip_load = false;
  uint64_t seed = 1;
};

// Counts of one phase on one connection; summed at the end.
struct PhaseStats {
  uint64_t ops = 0;
  uint64_t gets = 0;
  uint64_t hits = 0;
  uint64_t sets = 0;   // explicit SETs
  uint64_t fills = 0;  // SETs after a GET miss
  uint64_t get_errors = 0;
  uint64_t set_errors = 0;
  uint64_t verify_errors = 0;
  uint64_t bytes = 0;  // value bytes read and written

  void add(const PhaseStats& o) {
    ops += o.ops, gets += o.gets, hits += o.hits, sets += o.sets, fills += o.fills;
    get_errors += o.get_errors, set_errors += o.set_errors, verify_errors += o.verify_errors;
    bytes += o.bytes;
  }
};

struct Latencies {
  Histogram op;   // a whole operation: GET, GET+fill, or SET
  Histogram get;  // the GET request alone
  Histogram set;  // every SET request, fills included
};

// Hands out a bounded number of operations until a deadline; shared by the
// connections of one phase so the total is exact however they interleave.
class Budget {
 public:
  Budget(uint64_t ops, double seconds)
      : ops_(ops),
        deadline_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(seconds))) {}
  bool take() {
    if (stop_.load(std::memory_order_relaxed)) return false;
    if (taken_.fetch_add(1, std::memory_order_relaxed) >= ops_ || Clock::now() >= deadline_) {
      stop_.store(true, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  void stop() { stop_.store(true, std::memory_order_relaxed); }

 private:
  const uint64_t ops_;
  const Clock::time_point deadline_;
  std::atomic<uint64_t> taken_{0};
  std::atomic<bool> stop_{false};
};

// The first connection failure of the run; it ends the run with exit code 1.
class FatalError {
 public:
  void set(const Status& st) {
    std::lock_guard lock(mu_);
    if (message_.empty()) message_ = st.to_string();
  }
  std::string message() const {
    std::lock_guard lock(mu_);
    return message_;
  }

 private:
  mutable std::mutex mu_;
  std::string message_;
};

uint64_t nanos_since(Clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

class Worker {
 public:
  Worker(std::unique_ptr<CacheClient> client, KeySpace& keys, FatalError& fatal)
      : client_(std::move(client)), keys_(keys), fatal_(fatal) {}

  // SETs version 0 of ids first, first + stride, ...; false on a broken connection.
  bool load(size_t first, size_t stride, PhaseStats& stats) {
    for (size_t id = first; id < keys_.size(); id += stride) {
      if (!write(id, keys_.current_version(id), stats, nullptr)) return false;
      ++stats.sets;
    }
    return true;
  }

  // Closed loop: one operation at a time until the budget runs out.
  void mix(const Options& opt, const ZipfianChooser& zipf, uint64_t seed, Budget& budget,
           PhaseStats& stats, Latencies* lat) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    while (budget.take()) {
      size_t id = zipf.next(rng);
      Clock::time_point start = Clock::now();
      bool ok = coin(rng) < opt.get_fraction ? get_or_fill(id, stats, lat)
                                             : set_new_version(id, stats, lat);
      if (!ok) {
        budget.stop();
        return;
      }
      ++stats.ops;
      if (lat != nullptr) lat->op.record(nanos_since(start));
    }
  }

 private:
  bool get_or_fill(size_t id, PhaseStats& stats, Latencies* lat) {
    ++stats.gets;
    Clock::time_point start = Clock::now();
    Result<bool> hit = client_->get(keys_.key(id), &buffer_);
    if (lat != nullptr) lat->get.record(nanos_since(start));
    if (!hit) return count_error(hit.status(), stats.get_errors);
    if (*hit) {
      ++stats.hits;
      stats.bytes += buffer_.size();
      if (!keys_.verify(id, buffer_)) ++stats.verify_errors;
      return true;
    }
    ++stats.fills;
    return write(id, keys_.current_version(id), stats, lat);
  }

  bool set_new_version(size_t id, PhaseStats& stats, Latencies* lat) {
    ++stats.sets;
    return write(id, keys_.next_version(id), stats, lat);
  }

  bool write(size_t id, uint64_t version, PhaseStats& stats, Latencies* lat) {
    char head[KeySpace::kHeadSize];
    ValueParts value = keys_.value(id, version, head);
    Clock::time_point start = Clock::now();
    Status st = client_->set(keys_.key(id), value);
    if (lat != nullptr) lat->set.record(nanos_since(start));
    if (st.is_ok()) stats.bytes += value.size();
    return st.is_ok() || count_error(st, stats.set_errors);
  }

  // A refusal from the server is counted; a broken connection ends the run.
  bool count_error(const Status& st, uint64_t& counter) {
    if (st.code() == StatusCode::kIOError) {
      fatal_.set(st);
      return false;
    }
    if (counter++ == 0) std::fprintf(stderr, "loadgen: server refused: %s\n", st.message().c_str());
    return true;
  }

  std::unique_ptr<CacheClient> client_;
  KeySpace& keys_;
  FatalError& fatal_;
  std::string buffer_;
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// User + system CPU of this process, every thread: what the client's own
// work (syscalls, receive copies, verification) costs the shared machine.
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return secs(u.ru_utime) + secs(u.ru_stime);
}

// Runs fn(worker index) on one thread per worker and waits for all.
template <typename Fn>
void on_every_worker(size_t workers, Fn fn) {
  std::vector<std::jthread> threads;
  for (size_t i = 0; i < workers; ++i) threads.emplace_back([&fn, i] { fn(i); });
}

HistogramSnapshot merged(const std::vector<std::unique_ptr<Latencies>>& all,
                         Histogram Latencies::*which) {
  HistogramSnapshot sum;
  sum.buckets.assign(Histogram::kBuckets, 0);
  for (const auto& lat : all) {
    HistogramSnapshot s = ((*lat).*which).snapshot();
    sum.count += s.count;
    sum.sum += s.sum;
    sum.max = std::max(sum.max, s.max);
    for (size_t i = 0; i < s.buckets.size(); ++i) sum.buckets[i] += s.buckets[i];
  }
  return sum;
}

std::string latency_json(const HistogramSnapshot& s) {
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1e3; };
  double mean = s.count ? static_cast<double>(s.sum) / static_cast<double>(s.count) : 0.0;
  return fmt::format(
      "{{\"count\": {}, \"mean_us\": {:.1f}, \"p50_us\": {:.1f}, \"p90_us\": {:.1f}, "
      "\"p99_us\": {:.1f}, \"p999_us\": {:.1f}, \"max_us\": {:.1f}}}",
      s.count, mean / 1e3, us(s.percentile(0.5)), us(s.percentile(0.9)), us(s.percentile(0.99)),
      us(s.percentile(0.999)), us(s.max));
}

int run(const Options& opt) {
  Protocol protocol = opt.protocol == "resp" ? Protocol::kResp : Protocol::kMemcache;
  KeySpace keys(opt.keys, opt.min_value, opt.max_value, opt.seed);
  ZipfianChooser zipf(opt.keys, opt.zipf_theta, opt.seed);
  FatalError fatal;
  std::vector<std::unique_ptr<Worker>> workers;
  for (size_t i = 0; i < opt.connections; ++i) {
    auto client = connect_client(protocol, opt.host, opt.port);
    if (!client) {
      std::fprintf(stderr, "loadgen: %s\n", client.status().to_string().c_str());
      return 1;
    }
    workers.push_back(std::make_unique<Worker>(std::move(*client), keys, fatal));
  }
  const size_t n = workers.size();
  std::fprintf(stderr, "loadgen: %zu keys, mean value %.1f KiB, working set %.1f MiB\n", opt.keys,
               static_cast<double>(keys.mean_value_size()) / 1024.0,
               static_cast<double>(keys.mean_value_size() * opt.keys) / (1 << 20));

  std::vector<PhaseStats> load(n), warm(n), measured(n);
  Clock::time_point load_start = Clock::now();
  if (!opt.skip_load) {
    on_every_worker(n, [&](size_t i) { (void)workers[i]->load(i, n, load[i]); });
  }
  double load_seconds = seconds_since(load_start);
  std::fprintf(stderr, "loadgen: load %.1f s\n", load_seconds);
  if (std::string error = fatal.message(); !error.empty()) {
    std::fprintf(stderr, "loadgen: load failed: %s\n", error.c_str());
    return 1;
  }

  Clock::time_point warm_start = Clock::now();
  Budget warm_budget(opt.warm_ops, opt.seconds);
  on_every_worker(n, [&](size_t i) {
    workers[i]->mix(opt, zipf, opt.seed * 1000 + i, warm_budget, warm[i], nullptr);
  });
  double warm_seconds = seconds_since(warm_start);
  std::fprintf(stderr, "loadgen: warm %.1f s\n", warm_seconds);

  std::vector<std::unique_ptr<Latencies>> lat;
  for (size_t i = 0; i < n; ++i) lat.push_back(std::make_unique<Latencies>());
  Clock::time_point measure_start = Clock::now();
  const double cpu_start = cpu_seconds();
  Budget budget(opt.ops, opt.seconds);
  on_every_worker(n, [&](size_t i) {
    workers[i]->mix(opt, zipf, opt.seed * 2000 + i, budget, measured[i], lat[i].get());
  });
  double seconds = seconds_since(measure_start);
  const double client_cpu = cpu_seconds() - cpu_start;

  PhaseStats l, w, m;
  for (size_t i = 0; i < n; ++i) l.add(load[i]), w.add(warm[i]), m.add(measured[i]);
  double hit_ratio = m.gets ? static_cast<double>(m.hits) / static_cast<double>(m.gets) : 0.0;
  HistogramSnapshot op = merged(lat, &Latencies::op);
  std::fprintf(stderr,
               "loadgen: %llu ops in %.1f s: %.0f ops/s, hit ratio %.3f, p99 %.2f ms, "
               "verify errors %llu\n",
               static_cast<unsigned long long>(m.ops), seconds,
               static_cast<double>(m.ops) / seconds, hit_ratio,
               static_cast<double>(op.percentile(0.99)) / 1e6,
               static_cast<unsigned long long>(m.verify_errors + w.verify_errors));

  std::string json = fmt::format(
      "{{\"protocol\": \"{}\", \"connections\": {}, \"keys\": {}, \"mean_value_bytes\": {}, "
      "\"zipf_theta\": {}, \"get_fraction\": {}, \"seed\": {}, "
      "\"load\": {{\"seconds\": {:.2f}, \"sets\": {}, \"set_errors\": {}}}, "
      "\"warm\": {{\"seconds\": {:.2f}, \"ops\": {}, \"hits\": {}, \"gets\": {}, "
      "\"get_errors\": {}, \"set_errors\": {}, \"verify_errors\": {}}}, "
      "\"seconds\": {:.3f}, \"client_cpu_s\": {:.3f}, \"ops\": {}, \"ops_per_s\": {:.1f}, "
      "\"mb_per_s\": {:.1f}, "
      "\"gets\": {}, \"hits\": {}, \"hit_ratio\": {:.4f}, \"sets\": {}, \"fills\": {}, "
      "\"get_errors\": {}, \"set_errors\": {}, \"verify_errors\": {}, "
      "\"latency_op\": {}, \"latency_get\": {}, \"latency_set\": {}, \"error\": \"{}\"}}",
      opt.protocol, n, opt.keys, keys.mean_value_size(), opt.zipf_theta, opt.get_fraction, opt.seed,
      load_seconds, l.sets, l.set_errors, warm_seconds, w.ops, w.hits, w.gets, w.get_errors,
      w.set_errors, w.verify_errors, seconds, client_cpu, m.ops,
      static_cast<double>(m.ops) / seconds, static_cast<double>(m.bytes) / seconds / 1e6, m.gets,
      m.hits, hit_ratio, m.sets, m.fills, m.get_errors, m.set_errors, m.verify_errors,
      latency_json(op), latency_json(merged(lat, &Latencies::get)),
      latency_json(merged(lat, &Latencies::set)), fatal.message());
  std::printf("%s\n", json.c_str());
  std::string error = fatal.message();
  if (!error.empty()) std::fprintf(stderr, "loadgen: %s\n", error.c_str());
  return error.empty() ? 0 : 1;
}

}  // namespace
}  // namespace tierkv::bench

int main(int argc, char** argv) {
  tierkv::bench::Options opt;
  CLI::App app{"Closed-loop zipfian GET/SET load over RESP or memcached text protocol"};
  app.add_option("--host", opt.host, "server address");
  app.add_option("--port", opt.port, "server port")->required();
  app.add_option("--protocol", opt.protocol, "resp or memcache")
      ->check(CLI::IsMember({"resp", "memcache"}));
  app.add_option("--connections", opt.connections, "connections, one thread each")
      ->check(CLI::Range(1, 1024));
  app.add_option("--keys", opt.keys, "distinct keys")->check(CLI::Range(1, 100'000'000));
  app.add_option("--min-value", opt.min_value, "smallest value, bytes")
      ->check(CLI::Range(size_t{tierkv::bench::KeySpace::kHeadSize}, size_t{1} << 30));
  app.add_option("--max-value", opt.max_value, "largest value, bytes")
      ->check(CLI::Range(size_t{tierkv::bench::KeySpace::kHeadSize}, size_t{1} << 30));
  app.add_option("--zipf", opt.zipf_theta, "zipfian skew theta (0: uniform)")
      ->check(CLI::Range(0.0, 5.0));
  app.add_option("--get-fraction", opt.get_fraction, "share of operations that are GETs")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--ops", opt.ops, "measured operations (at most)");
  app.add_option("--seconds", opt.seconds, "measured seconds (at most); also caps warm-up")
      ->check(CLI::PositiveNumber);
  app.add_option("--warm-ops", opt.warm_ops, "unmeasured zipfian operations after the load");
  app.add_flag("--skip-load", opt.skip_load, "do not write every key before measuring");
  app.add_option("--seed", opt.seed, "workload seed (sizes, key order, operation mix)");
  CLI11_PARSE(app, argc, argv);
  if (opt.min_value > opt.max_value) {
    std::fprintf(stderr, "loadgen: --min-value exceeds --max-value\n");
    return 2;
  }
  return tierkv::bench::run(opt);
}
