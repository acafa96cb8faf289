// prefetch-ab-driver: the native client of bench/prefetch-ab. It plays a
// simulated inference engine against a running tierkv-server and prints one
// JSON object with every request's time to first token (TTFT).
//
// Prefix i has `chunks` data keys p<i>:c<j>:kv_bytes (each `value-bytes`)
// and companion keys p<i>:c<j>:metadata. A request arrives, is probed on a
// client connection (EXISTS of the data keys, TIER.EXISTS ... PREFETCH, or
// EXISTS of the metadata keys), waits in one FIFO queue, and is served by the
// one engine thread: it GETs every data key (pipelined), which is the TTFT
// (arrival -> last byte), then computes for `compute-us` (a sleep: the GPU's
// prefill, not our CPU). Arrivals are closed loop (each of `clients` sends its
// next request when its last one was computed) or open loop (Poisson at
// `rate` per second, probed by whichever client is free; TTFT counts from the
// scheduled arrival). Request k uses the prefix splitmix64(seed + k) %
// prefixes, so every arm sees the same sequence.
//
//   prefetch-ab-driver --port 6390 --probe prefetch --clients 4 --requests 600 --warmup 16
//       --prefixes 64 --chunks 4 --value-bytes 262144 --compute-us 2000 [--open --rate 80]
//       [--server-pid PID]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/resp_connection.h"
#include "common/splitmix64.h"
#include "core/clock.h"

namespace {

using tierkv::mono_ns;
using tierkv::bench::Connection;
using tierkv::bench::encode_command;
using tierkv::bench::splitmix64;

struct Options {
  uint16_t port = 6390;
  std::string probe = "exists";  // exists | prefetch | metadata
  uint32_t clients = 4;
  uint32_t requests = 600;
  uint32_t warmup = 16;
  uint32_t prefixes = 64;
  uint32_t chunks = 4;
  uint64_t value_bytes = 256 << 10;
  uint64_t compute_us = 2000;
  bool open = false;
  double rate = 0;  // open loop: arrivals per second
  uint64_t seed = 1;
  int server_pid = 0;
};

std::string key(uint32_t prefix, uint32_t chunk, const char* kind) {
  return "p" + std::to_string(prefix) + ":c" + std::to_string(chunk) + ":" + kind;
}

// The server's CPU time so far (utime + stime of /proc/PID/stat), seconds.
double server_cpu_seconds(int pid) {
  if (pid <= 0) return 0;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

struct Request {
  uint64_t index = 0;
  uint32_t prefix = 0;
  uint64_t arrival_ns = 0;
  uint64_t probed_ns = 0;
  int64_t present = 0;
  // Closed loop: the client waits for its request to be computed.
  std::mutex* mu = nullptr;
  std::condition_variable* cv = nullptr;
  bool* done = nullptr;
};

struct Record {
  uint64_t index;
  double ttft_ms, probe_us, wait_ms, load_ms;
};

class Run {
 public:
  explicit Run(const Options& o) : o_(o), engine_conn_(o.port) {
    for (uint32_t p = 0; p < o.prefixes; ++p) {
      std::string gets, probe;
      std::vector<std::string> names;
      for (uint32_t j = 0; j < o.chunks; ++j) {
        const std::string data = key(p, j, "kv_bytes");
        gets += encode_command({"GET", data});
        names.push_back(o.probe == "metadata" ? key(p, j, "metadata") : data);
      }
      std::vector<std::string_view> probe_args = {o.probe == "prefetch" ? "TIER.EXISTS" : "EXISTS"};
      for (const std::string& n : names) probe_args.push_back(n);
      if (o.probe == "prefetch") probe_args.push_back("PREFETCH");
      gets_.push_back(std::move(gets));
      probes_.push_back(encode_command(probe_args));
    }
    if (o.open) arrivals_ = poisson_arrivals();
  }

  void go() {
    cpu_before_ = server_cpu_seconds(o_.server_pid);
    start_ns_ = mono_ns() + 20'000'000;  // every thread is up by then
    std::thread engine([this] { serve(); });
    std::vector<std::thread> clients;
    for (uint32_t i = 0; i < o_.clients; ++i) clients.emplace_back([this] { client(); });
    for (auto& t : clients) t.join();
    {
      std::lock_guard lock(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    engine.join();
    end_ns_ = mono_ns();
    cpu_after_ = server_cpu_seconds(o_.server_pid);
  }

  void print() const {
    std::string out = "{";
    auto list = [&](const char* name, auto get) {
      out += std::string("\"") + name + "\": [";
      for (size_t i = 0; i < records_.size(); ++i) {
        if (i) out += ",";
        out += std::to_string(get(records_[i]));
      }
      out += "], ";
    };
    list("index", [](const Record& r) { return r.index; });
    list("ttft_ms", [](const Record& r) { return r.ttft_ms; });
    list("probe_us", [](const Record& r) { return r.probe_us; });
    list("wait_ms", [](const Record& r) { return r.wait_ms; });
    list("load_ms", [](const Record& r) { return r.load_ms; });
    out += "\"bad_gets\": " + std::to_string(bad_gets_) +
           ", \"probe_short\": " + std::to_string(probe_short_) +
           ", \"server_cpu_s\": " + std::to_string(cpu_after_ - cpu_before_) +
           ", \"seconds\": " + std::to_string(static_cast<double>(end_ns_ - start_ns_) / 1e9) +
           ", \"requests\": " + std::to_string(o_.requests) + "}";
    std::puts(out.c_str());
  }

 private:
  std::vector<uint64_t> poisson_arrivals() const {
    std::mt19937_64 rng(o_.seed);
    std::exponential_distribution<double> gap(o_.rate);
    std::vector<uint64_t> at(o_.requests);
    double t = 0;
    for (auto& a : at) {
      a = static_cast<uint64_t>(t * 1e9);
      t += gap(rng);
    }
    return at;
  }

  // One probing connection: takes the next request, waits for its arrival
  // (open loop), probes, queues it, and (closed loop) waits until served.
  void client() {
    Connection conn(o_.port);
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    for (;;) {
      const uint64_t k = next_.fetch_add(1);
      if (k >= o_.requests) return;
      Request r;
      r.index = k;
      r.prefix = static_cast<uint32_t>(splitmix64(o_.seed * 1'000'003 + k) % o_.prefixes);
      if (o_.open) {
        r.arrival_ns = start_ns_ + arrivals_[k];
        while (mono_ns() < r.arrival_ns)
          std::this_thread::sleep_for(std::chrono::nanoseconds(r.arrival_ns - mono_ns()));
      } else {
        r.arrival_ns = std::max(mono_ns(), start_ns_);
        while (mono_ns() < r.arrival_ns) std::this_thread::yield();
      }
      conn.send({probes_[r.prefix]});
      int64_t len = 0;
      uint64_t head = 0;
      const std::string line = conn.read_reply(&len, &head);
      r.probed_ns = mono_ns();
      r.present = line.size() > 1 && line[0] == ':' ? std::stoll(line.substr(1)) : -1;
      if (!o_.open) {
        r.mu = &mu;
        r.cv = &cv;
        r.done = &done;
        done = false;
      }
      {
        std::lock_guard lock(mu_);
        queue_.push_back(r);
      }
      cv_.notify_one();
      if (!o_.open) {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return done; });
      }
    }
  }

  void serve() {
    for (;;) {
      Request r;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
        if (queue_.empty()) return;
        r = queue_.front();
        queue_.pop_front();
      }
      const uint64_t start = mono_ns();
      engine_conn_.send({gets_[r.prefix]});
      for (uint32_t j = 0; j < o_.chunks; ++j) {
        int64_t len = 0;
        uint64_t head = 0;
        engine_conn_.read_reply(&len, &head);
        if (len != static_cast<int64_t>(o_.value_bytes)) ++bad_gets_;
      }
      const uint64_t end = mono_ns();
      if (r.present != static_cast<int64_t>(o_.chunks)) ++probe_short_;
      if (r.index >= o_.warmup)
        records_.push_back(Record{r.index, static_cast<double>(end - r.arrival_ns) / 1e6,
                                  static_cast<double>(r.probed_ns - r.arrival_ns) / 1e3,
                                  static_cast<double>(start - r.probed_ns) / 1e6,
                                  static_cast<double>(end - start) / 1e6});
      std::this_thread::sleep_until(std::chrono::steady_clock::now() +
                                    std::chrono::microseconds(o_.compute_us));
      if (r.done) {
        {
          std::lock_guard lock(*r.mu);
          *r.done = true;
        }
        r.cv->notify_one();
      }
    }
  }

  const Options o_;
  Connection engine_conn_;
  std::vector<std::string> gets_, probes_;  // by prefix, encoded once
  std::vector<uint64_t> arrivals_;          // open loop: offsets from the start
  std::atomic<uint64_t> next_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;    // under mu_
  bool closing_ = false;         // under mu_
  std::vector<Record> records_;  // the engine thread's
  uint64_t bad_gets_ = 0, probe_short_ = 0;
  uint64_t start_ns_ = 0, end_ns_ = 0;
  double cpu_before_ = 0, cpu_after_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"prefetch-ab-driver: TTFT of a simulated inference engine"};
  app.add_option("--port", o.port)->required();
  app.add_option("--probe", o.probe)->check(CLI::IsMember({"exists", "prefetch", "metadata"}));
  app.add_option("--clients", o.clients)->check(CLI::Range(1u, 256u));
  app.add_option("--requests", o.requests)->check(CLI::Range(1u, 1000000u));
  app.add_option("--warmup", o.warmup);
  app.add_option("--prefixes", o.prefixes)->check(CLI::Range(1u, 1000000u));
  app.add_option("--chunks", o.chunks)->check(CLI::Range(1u, 4096u));
  app.add_option("--value-bytes", o.value_bytes);
  app.add_option("--compute-us", o.compute_us);
  app.add_flag("--open", o.open, "open loop: Poisson arrivals at --rate per second");
  app.add_option("--rate", o.rate);
  app.add_option("--seed", o.seed);
  app.add_option("--server-pid", o.server_pid, "for the server's CPU time per request");
  CLI11_PARSE(app, argc, argv);
  if (o.open && o.rate <= 0) {
    std::fprintf(stderr, "prefetch-ab-driver: --open needs --rate > 0\n");
    return 2;
  }
  try {
    Run run(o);
    run.go();
    run.print();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prefetch-ab-driver: %s\n", e.what());
    return 1;
  }
  return 0;
}
