// tierkv-stream-pipeline: the seed's streaming experiment, in-process.
// Tiles (one key each) sit on flash only; a consumer takes them in order
// through a StreamReader and spends a busy C ns of compute on each, while
// the stream keeps D tiles ahead over P channels with a modelled device
// latency L (backing-latency-ns). Prints one JSON object per (L, P, D) run
// on stdout; run.py makes the table, the RESULT lines and the plot.
#include <fmt/format.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "store/store.h"
#include "store/store_tiers.h"
#include "store/stream/stream_reader.h"

namespace {

using tierkv::Store;

struct Args {
  uint64_t latency_ns = 50'000;
  uint64_t compute_ns = 30'000;
  int tiles = 4096;
  int64_t tile_bytes = 16 << 10;
  std::vector<uint32_t> channels = {1, 2, 4};
  std::vector<int32_t> depths = {0, 1, 2, 4, 8};
  std::string dir = "/tmp";
  bool pin = true;
};

// With --pin, the store's threads (created while the main thread runs on
// CPU 0, whose mask they inherit) keep CPU 0, and the consumer gets CPU 1
// to itself. The consumer stands for an accelerator's compute, which in a
// real deployment does not share a core with the I/O path; on a 2-core VM
// an unpinned consumer is preempted by the store's threads at random.
bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

void busy_ns(uint64_t ns) {
  const uint64_t until = tierkv::mono_ns() + ns;
  while (tierkv::mono_ns() < until) {
  }
}

std::string tile_key(int i) {
  return fmt::format("tile:{:05d}", i);
}

struct Run {
  double ns_per_tile = 0;
  double serve_ns = 0;  // median time in next() for a tile that had arrived
  tierkv::StreamCounts counts;
};

Run run_once(Store& store, const std::vector<std::string>& keys, const Args& a, int32_t depth,
             uint32_t channels) {
  std::vector<uint64_t> hit_ns;
  hit_ns.reserve(keys.size());
  const uint64_t start = tierkv::mono_ns();
  auto stream = store.open_stream(
      keys, tierkv::StreamOptions{.depth = depth, .channels = channels, .use_once = true});
  uint64_t checksum = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t hits_before = stream->counts().hits;
    const uint64_t t0 = tierkv::mono_ns();
    tierkv::Result<tierkv::StreamValue> v = stream->next();
    const uint64_t t1 = tierkv::mono_ns();
    if (!v) {
      fmt::print(stderr, "tile {}: {}\n", i, v.status().to_string());
      exit(1);
    }
    if (stream->counts().hits > hits_before) hit_ns.push_back(t1 - t0);
    v->for_each_segment([&](std::string_view s) { checksum += s.empty() ? 0 : s[0]; });
    busy_ns(a.compute_ns);
  }
  Run r;
  r.ns_per_tile = static_cast<double>(tierkv::mono_ns() - start) / static_cast<double>(keys.size());
  r.counts = stream->counts();
  if (!hit_ns.empty()) {
    std::nth_element(hit_ns.begin(), hit_ns.begin() + hit_ns.size() / 2, hit_ns.end());
    r.serve_ns = static_cast<double>(hit_ns[hit_ns.size() / 2]);
  }
  if (checksum == 1) fmt::print(stderr, "\n");  // keeps the reads observable
  return r;
}

std::unique_ptr<Store> open_store(const Args& a, const std::string& path) {
  tierkv::Config c;
  c.memory = 64 << 20;
  c.flash_path = path;
  c.flash_size = std::max<int64_t>(int64_t{a.tiles} * a.tile_bytes * 2, 256 << 20);
  c.flash_preallocate = false;
  c.backing_latency_ns = static_cast<int64_t>(a.latency_ns);
  c.dirty_max_fraction = 1;
  c.active_expire_hz = 0;
  auto s = Store::open(c);
  if (!s) {
    fmt::print(stderr, "open: {}\n", s.status().to_string());
    exit(1);
  }
  return std::move(*s);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"tierkv streaming pipeline benchmark (in-process)"};
  app.add_option("--latency-ns", a.latency_ns, "backing-latency-ns L");
  app.add_option("--compute-ns", a.compute_ns, "busy compute C per tile");
  app.add_option("--tiles", a.tiles, "tiles");
  app.add_option("--tile-bytes", a.tile_bytes, "bytes per tile");
  app.add_option("--channels", a.channels, "P values")->delimiter(',');
  app.add_option("--depths", a.depths, "D values")->delimiter(',');
  app.add_option("--dir", a.dir, "directory for the flash file");
  app.add_option("--pin", a.pin, "store threads on CPU 0, the consumer on CPU 1");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);  // stdout carries the results

  std::string templ = a.dir + "/tierkv-pipeline-XXXXXX";
  const std::string dir = ::mkdtemp(templ.data());
  bool pinned = a.pin && std::thread::hardware_concurrency() >= 2 && pin_to(0);
  {
    auto store = open_store(a, dir + "/flash.dat");
    pinned = pinned && pin_to(1);
    if (a.pin && !pinned) fmt::print(stderr, "not pinned: fewer than 2 CPUs, or refused\n");
    std::vector<std::string> keys;
    std::string value(static_cast<size_t>(a.tile_bytes), 'x');
    for (int i = 0; i < a.tiles; ++i) {
      keys.push_back(tile_key(i));
      value[0] = static_cast<char>('a' + i % 26);
      if (!store->put(keys.back(), value)) return 1;
    }
    // On flash only: written down, then forgotten by memory.
    if (!store->persist_all().is_ok()) return 1;
    for (const std::string& k : keys) tierkv::StoreTiers::memory(*store).remove(k);
    tierkv::Histogram& lat =
        store->metrics().latency("tierkv_flash_read_latency", "Chunk read latency");
    for (uint32_t p : a.channels) {
      for (int32_t d : a.depths) {
        lat.reset();
        Run r = run_once(*store, keys, a, d, p);
        tierkv::HistogramSnapshot snap = lat.snapshot();
        fmt::print(
            "{{\"mode\": \"inproc\", \"L_ns\": {}, \"C_ns\": {}, \"P\": {}, \"D\": {}, "
            "\"tiles\": {}, \"ns_per_tile\": {:.1f}, \"serve_ns\": {:.1f}, "
            "\"read_p50_ns\": {}, \"issued\": {}, \"hits\": {}, \"late\": {}, \"wasted\": {}, "
            "\"pinned\": {}}}\n",
            a.latency_ns, a.compute_ns, p, d, a.tiles, r.ns_per_tile, r.serve_ns,
            snap.count ? snap.percentile(0.5) : 0, r.counts.issued, r.counts.hits, r.counts.late,
            r.counts.wasted, pinned);
        fflush(stdout);
      }
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
