// tierkv-wire-bench: loads same-sized objects into a running tierkv-server
// over RESP, then GETs random ones from several connections, each keeping a
// fixed number of GETs pipelined, and reports the bytes per second that came
// back over the wire. Every reply's size and first 8 bytes are checked.
//
//   tierkv-wire-bench --port 6390 --objects 900 --size 1m --load
//   tierkv-wire-bench --port 6390 --objects 900 --size 1m --connections 4 --pipeline 4 --seconds 5
//
// Keys and values are those of tierkv-flash-bench (object_key, fill_object).
// One JSON line per phase on stdout.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/resp_connection.h"
#include "common/splitmix64.h"
#include "core/clock.h"
#include "core/config.h"
#include "read_runner.h"

namespace {

using tierkv::bench::Connection;
using tierkv::bench::FillSpec;
using tierkv::bench::send_get;
using tierkv::bench::send_set;
using tierkv::bench::splitmix64;

struct Options {
  uint16_t port = 6390;
  uint64_t objects = 0;
  std::string size = "1m";
  uint32_t key_length = 24;
  uint32_t connections = 4;
  uint32_t pipeline = 4;
  double seconds = 5;
  double warmup = 0.5;
  uint64_t pad_mib = 0;
  bool load = false;
};

double cpu_seconds_now() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

// SETs ids first, first + step, ... below `objects` with `pipeline` in flight.
uint64_t load_part(const Options& o, const FillSpec& spec, uint64_t first, uint64_t step,
                   const std::string& prefix) {
  Connection c(o.port);
  std::string value;
  uint64_t errors = 0, sent = 0, answered = 0;
  const uint64_t count = first < spec.objects ? (spec.objects - first + step - 1) / step : 0;
  while (answered < count) {
    while (sent < count && sent - answered < o.pipeline) {
      const uint64_t id = first + sent * step;
      tierkv::bench::fill_object(value, spec, id);
      send_set(c, prefix + tierkv::bench::object_key(id, spec.key_length).substr(prefix.size()),
               value);
      ++sent;
    }
    int64_t len = 0;
    uint64_t head = 0;
    if (c.read_reply(&len, &head) != "+OK") ++errors;
    ++answered;
  }
  return errors;
}

int load(const Options& o, const FillSpec& spec) {
  const uint64_t start = tierkv::mono_ns();
  std::atomic<uint64_t> errors{0};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < o.connections; ++t)
    threads.emplace_back([&, t] { errors += load_part(o, spec, t, o.connections, ""); });
  for (auto& t : threads) t.join();
  const double seconds = double(tierkv::mono_ns() - start) / 1e9;
  // Padding objects under other keys push the last loaded objects out of
  // memory, so that every GET afterwards is served from flash.
  FillSpec pad = spec;
  pad.objects = spec.object_size() ? (o.pad_mib << 20) / spec.object_size() : 0;
  const uint64_t pad_errors = load_part(o, pad, 0, 1, "pad:");
  std::printf(
      "{\"event\":\"load\",\"objects\":%llu,\"object_size\":%llu,\"seconds\":%.3f,"
      "\"mb_s\":%.1f,\"errors\":%llu,\"pad_objects\":%llu,\"pad_errors\":%llu}\n",
      static_cast<unsigned long long>(spec.objects),
      static_cast<unsigned long long>(spec.object_size()), seconds,
      double(spec.objects * spec.object_size()) / 1e6 / seconds,
      static_cast<unsigned long long>(errors.load()), static_cast<unsigned long long>(pad.objects),
      static_cast<unsigned long long>(pad_errors));
  return errors.load() == 0 && pad_errors == 0 ? 0 : 1;
}

struct GetTotals {
  std::mutex mu;
  uint64_t ops = 0, bytes = 0, errors = 0;
  std::vector<uint64_t> latencies;
};

// Random GETs on one connection, `pipeline` in flight, until `end_ns`;
// replies that complete inside [begin_ns, end_ns) are counted.
void get_loop(const Options& o, const FillSpec& spec, uint32_t thread, uint64_t begin_ns,
              uint64_t end_ns, GetTotals& totals) {
  Connection c(o.port);
  std::deque<std::pair<uint64_t, uint64_t>> in_flight;  // id, issued at
  uint64_t seq = uint64_t{thread} << 48, ops = 0, bytes = 0, errors = 0;
  std::vector<uint64_t> latencies;
  for (;;) {
    const uint64_t now = tierkv::mono_ns();
    while (now < end_ns && in_flight.size() < o.pipeline) {
      const uint64_t id = splitmix64(++seq) % spec.objects;
      send_get(c, tierkv::bench::object_key(id, spec.key_length));
      in_flight.emplace_back(id, now);
    }
    if (in_flight.empty()) break;
    int64_t len = 0;
    uint64_t head = 0;
    c.read_reply(&len, &head);
    const auto [id, issued] = in_flight.front();
    in_flight.pop_front();
    const uint64_t done = tierkv::mono_ns();
    const bool good =
        len == static_cast<int64_t>(spec.object_size()) && head == tierkv::bench::chunk_tag(id, 0);
    if (!good) {
      ++errors;
    } else if (done >= begin_ns && done < end_ns) {
      ++ops;
      bytes += static_cast<uint64_t>(len);
      latencies.push_back(done - issued);
    }
  }
  std::lock_guard lock(totals.mu);
  totals.ops += ops;
  totals.bytes += bytes;
  totals.errors += errors;
  totals.latencies.insert(totals.latencies.end(), latencies.begin(), latencies.end());
}

int get_phase(const Options& o, const FillSpec& spec) {
  const uint64_t begin_ns = tierkv::mono_ns() + static_cast<uint64_t>(o.warmup * 1e9);
  const uint64_t end_ns = begin_ns + static_cast<uint64_t>(o.seconds * 1e9);
  GetTotals totals;
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < o.connections; ++t)
    threads.emplace_back([&, t] { get_loop(o, spec, t, begin_ns, end_ns, totals); });
  const uint64_t now = tierkv::mono_ns();
  if (begin_ns > now) std::this_thread::sleep_for(std::chrono::nanoseconds(begin_ns - now));
  const double cpu_begin = cpu_seconds_now();
  const uint64_t now2 = tierkv::mono_ns();
  if (end_ns > now2) std::this_thread::sleep_for(std::chrono::nanoseconds(end_ns - now2));
  const double cpu_end = cpu_seconds_now();
  for (auto& t : threads) t.join();
  std::sort(totals.latencies.begin(), totals.latencies.end());
  auto pct = [&](size_t p) {
    if (totals.latencies.empty()) return 0.0;
    return double(totals.latencies[std::min(totals.latencies.size() - 1,
                                            totals.latencies.size() * p / 100)]) /
           1e3;
  };
  std::printf(
      "{\"event\":\"get\",\"object_size\":%llu,\"connections\":%u,\"pipeline\":%u,"
      "\"seconds\":%.3f,\"ops\":%llu,\"ops_s\":%.1f,\"mb_s\":%.2f,\"gb_s\":%.4f,"
      "\"errors\":%llu,\"client_cpu_percent\":%.1f,\"lat_p50_us\":%.1f,"
      "\"lat_p99_us\":%.1f}\n",
      static_cast<unsigned long long>(spec.object_size()), o.connections, o.pipeline, o.seconds,
      static_cast<unsigned long long>(totals.ops), double(totals.ops) / o.seconds,
      double(totals.bytes) / 1e6 / o.seconds, double(totals.bytes) / 1e9 / o.seconds,
      static_cast<unsigned long long>(totals.errors), 100.0 * (cpu_end - cpu_begin) / o.seconds,
      pct(50), pct(99));
  return totals.errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Random GETs of same-sized objects from a running tierkv-server"};
  app.add_option("--port", o.port, "server port on 127.0.0.1");
  app.add_option("--objects", o.objects, "number of objects (ids 0..N-1)")->required();
  app.add_option("--size", o.size, "object size: 4k, 64k, 1m, or bytes");
  app.add_option("--key-length", o.key_length, "key length in bytes (>= 20)");
  app.add_option("--connections", o.connections, "connections, one thread each")
      ->check(CLI::Range(1, 64));
  app.add_option("--pipeline", o.pipeline, "requests in flight per connection")
      ->check(CLI::Range(1, 256));
  app.add_option("--seconds", o.seconds, "measured seconds of GETs");
  app.add_option("--warmup", o.warmup, "unmeasured seconds before");
  app.add_option("--pad-mib", o.pad_mib, "--load: MiB of padding objects written last");
  app.add_flag("--load", o.load, "SET the objects instead of reading them");
  CLI11_PARSE(app, argc, argv);
  FillSpec spec;
  tierkv::Result<int64_t> size = tierkv::parse_byte_size(o.size);
  spec.chunk_size = size ? static_cast<uint64_t>(*size) : 0;
  spec.key_length = o.key_length;
  spec.objects = o.objects;
  if (spec.chunk_size < 8 || o.objects == 0) {
    std::fprintf(stderr, "bad --size or --objects\n");
    return 2;
  }
  try {
    return o.load ? load(o, spec) : get_phase(o, spec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tierkv-wire-bench: %s\n", e.what());
    return 1;
  }
}
