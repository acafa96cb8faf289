// tierkv-flash-reclaim-replay: one real cache trace through a real Store
// (memory tier over a flash tier in a file), as a look-aside cache: GET
// each request's key, SET it on a miss. With --churn, a share of the hits
// also rewrite their object (a new value of the same size), leaving dead
// bytes in the flash log as overwrites do in service. Reclaim picks its
// regions as the server's does; --reinsertion turns on hit-based
// reinsertion (flash-reinsertion).
//
// Prints one JSON line: requests, memory and flash hits, misses, the flash
// hit ratio (flash hits over the requests that memory missed), the flash
// tier's write amplification (device bytes over user bytes), reinsertions,
// reclaims, and the live share of the flash capacity at the end.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "cli/trace/dense_trace.h"
#include "cli/trace/trace_reader.h"
#include "core/config.h"
#include "store/store.h"

namespace {

struct Options {
  std::string trace;
  std::string dir = "/tmp";
  double memory_fraction = 0.05;  // of the unique objects' bytes
  double flash_ratio = 4;         // flash size over memory size
  uint32_t value_size = 4000;     // with its record header, one 4 KiB block
  double churn = 0;               // share of hits that rewrite their object
  bool reinsertion = false;
  uint64_t region_size = 1 << 20;
  uint64_t max_requests = 2'000'000;
  uint64_t seed = 1;
};

tierkv::Config store_config(const Options& o, uint64_t unique, const std::string& flash_path) {
  tierkv::Config c;
  const double unique_bytes = static_cast<double>(unique) * o.value_size;
  c.memory = std::max<int64_t>(1 << 20, static_cast<int64_t>(unique_bytes * o.memory_fraction));
  c.memory_shards = 1;
  c.chunk_size = 64 << 10;  // values are far smaller: one chunk each
  c.active_expire_hz = 0;
  c.flash_path = flash_path;
  c.region_size = static_cast<int64_t>(o.region_size);
  const auto flash = static_cast<int64_t>(static_cast<double>(c.memory) * o.flash_ratio);
  c.flash_size = std::max<int64_t>(flash / c.region_size, 8) * c.region_size;
  c.flash_preallocate = false;
  c.flash_direct_io = false;  // the page cache: the policy is measured, not the device
  c.flash_reinsertion = o.reinsertion;
  return c;
}

// The value written for `key` at `generation`: its first bytes name both.
std::string value_of(uint64_t key, uint64_t generation, uint32_t size) {
  std::string v(size, static_cast<char>('a' + (key + generation) % 26));
  std::memcpy(v.data(), &key, sizeof(key));
  std::memcpy(v.data() + sizeof(key), &generation, sizeof(generation));
  return v;
}

// A deterministic share of requests, by request index.
bool chosen(uint64_t request, uint64_t seed, double share) {
  uint64_t x = (request + 1) * 0x9E3779B97F4A7C15ull ^ seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / static_cast<double>(1ull << 53) < share;
}

int run(const Options& o) {
  tierkv::Result<tierkv::trace::Trace> raw = tierkv::trace::read_trace(o.trace);
  if (!raw) {
    std::fprintf(stderr, "error: %s\n", raw.status().to_string().c_str());
    return 2;
  }
  if (raw->ids.size() > o.max_requests) raw->ids.resize(o.max_requests);
  const tierkv::trace::DenseTrace trace = tierkv::trace::densify(raw->ids);
  const std::string flash_path =
      o.dir + "/tierkv-flash-reclaim-" + std::to_string(::getpid()) + ".dat";
  const tierkv::Config config = store_config(o, trace.unique(), flash_path);
  auto opened = tierkv::Store::open(config);
  if (!opened) {
    std::fprintf(stderr, "error: %s\n", opened.status().to_string().c_str());
    return 1;
  }
  tierkv::Store& store = **opened;
  std::vector<uint32_t> generation(trace.unique(), 0);
  uint64_t hits = 0, rewrites = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < trace.requests(); ++i) {
    const uint32_t id = trace.ids[i];
    const std::string key = "k" + std::to_string(trace.keys[id]);
    const bool hit = store.get(key).is_ok();  // the view (and its pins) dies here
    if (hit) ++hits;
    if (hit && !chosen(i, o.seed, o.churn)) continue;
    if (hit) ++rewrites, ++generation[id];
    tierkv::Result<tierkv::WriteResult> put =
        store.put(key, value_of(trace.keys[id], generation[id], o.value_size));
    if (!put) {
      std::fprintf(stderr, "error: SET %s: %s\n", key.c_str(), put.status().to_string().c_str());
      return 1;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const tierkv::StoreStats st = store.stats();
  const uint64_t memory_hits = hits - st.flash_hits;
  const uint64_t reached_flash = trace.requests() - memory_hits;
  const double live = static_cast<double>(st.flash.objects) * o.value_size /
                      static_cast<double>(std::max<uint64_t>(1, st.flash.capacity_bytes));
  std::printf(
      "{\"requests\":%zu,\"unique\":%zu,\"memory_bytes\":%lld,\"flash_bytes\":%lld,"
      "\"memory_hits\":%llu,\"flash_hits\":%llu,\"misses\":%llu,\"rewrites\":%llu,"
      "\"miss_ratio\":%.5f,\"flash_hit_ratio\":%.5f,\"write_amplification\":%.4f,"
      "\"reinsertions\":%llu,\"reclaims\":%llu,\"flash_live_share\":%.4f,\"seconds\":%.2f,"
      "\"fresh_read_share\":%.4f,\"copies_read_share\":%.4f,\"copying\":%d}\n",
      trace.requests(), trace.unique(), static_cast<long long>(config.memory),
      static_cast<long long>(config.flash_size), static_cast<unsigned long long>(memory_hits),
      static_cast<unsigned long long>(st.flash_hits),
      static_cast<unsigned long long>(trace.requests() - hits),
      static_cast<unsigned long long>(rewrites),
      static_cast<double>(trace.requests() - hits) / static_cast<double>(trace.requests()),
      reached_flash ? static_cast<double>(st.flash_hits) / static_cast<double>(reached_flash) : 0,
      st.flash.write_amplification, static_cast<unsigned long long>(st.flash.reinsertions),
      static_cast<unsigned long long>(st.flash.reclaims), live, secs,
      st.flash.reinsert_fresh_read_share, st.flash.reinsert_copies_read_share,
      st.flash.reinsert_copying ? 1 : 0);
  opened->reset();
  std::error_code ec;
  std::filesystem::remove(flash_path, ec);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"tierkv-flash-reclaim-replay: a cache trace through memory and flash"};
  app.add_option("--trace", o.trace, "trace file")->required()->check(CLI::ExistingFile);
  app.add_option("--dir", o.dir, "where the flash file goes")->check(CLI::ExistingDirectory);
  app.add_option("--memory-fraction", o.memory_fraction, "memory, of the unique objects' bytes")
      ->check(CLI::Range(0.0001, 1.0));
  app.add_option("--flash-ratio", o.flash_ratio, "flash size over memory size")
      ->check(CLI::Range(1.0, 100.0));
  app.add_option("--value-size", o.value_size)->check(CLI::Range(64u, 1u << 20));
  app.add_option("--churn", o.churn, "share of hits that rewrite their object")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--reinsertion", o.reinsertion, "hit-based reinsertion on reclaim");
  app.add_option("--region-size", o.region_size)->check(CLI::Range(1ull << 20, 64ull << 20));
  app.add_option("--max-requests", o.max_requests)->check(CLI::Range(1ull, 1ull << 32));
  app.add_option("--seed", o.seed);
  CLI11_PARSE(app, argc, argv);
  return run(o);
}
