// tierkv-scan-resistance: the seed's scan + reuse shape, in-process. Memory
// holds `memory-chunks` chunks; a hot set of `hot` chunks is read `reuse`
// times per token while `scan` single-chunk keys stream past, for `tokens`
// tokens. Everything starts on flash only, and promotion-on-hit admits on
// the first hit, so the ideal is that only the first read of each hot
// chunk misses. Prints one JSON object per (policy, mode) on stdout.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/store.h"
#include "store/store_tiers.h"
#include "store/stream/stream_reader.h"

namespace {

using tierkv::Store;

struct Args {
  int memory_chunks = 512;
  int hot = 200;
  int reuse = 3;
  int scan = 3000;
  int tokens = 10;
  int64_t chunk = 64 << 10;
  std::vector<std::string> policies = {"s3fifo", "lru", "clock", "sieve"};
  std::string dir = "/tmp";
};

// A plain (counted) read, waited for; true if memory answered it.
bool read_hit(Store& store, const std::string& key) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  tierkv::FlashReadCallbacks cb;
  cb.on_piece = [](tierkv::ValuePiece) {};
  cb.on_done = [&](tierkv::Status) {
    std::lock_guard lock(mu);
    done = true;
    cv.notify_all();
  };
  tierkv::ReadStart r = store.read(key, 0, UINT64_MAX, cb);
  if (r.where != tierkv::ReadStart::Where::kFlash)
    return r.where == tierkv::ReadStart::Where::kMemory;
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  return false;
}

std::unique_ptr<Store> open_store(const Args& a, const std::string& policy,
                                  const std::string& path) {
  tierkv::Config c;
  // Room for memory_chunks chunks with their metadata (a few hundred bytes each).
  c.memory = std::max<int64_t>(int64_t{a.memory_chunks} * (a.chunk + 512), 1 << 20);
  c.chunk_size = a.chunk;
  c.memory_shards = 1;  // one policy sees every chunk: the policy is what is compared
  c.flash_path = path;
  c.flash_size = std::max<int64_t>(int64_t{a.scan + a.hot} * a.chunk * 2, 64 << 20);
  c.flash_preallocate = false;
  c.promotion_threshold = 1;
  c.dirty_max_fraction = 1;
  c.active_expire_hz = 0;
  if (!tierkv::config_set(c, "eviction-policy", policy).is_ok()) exit(2);
  auto s = Store::open(c);
  if (!s) {
    fmt::print(stderr, "open: {}\n", s.status().to_string());
    exit(1);
  }
  return std::move(*s);
}

void run(const Args& a, const std::string& policy, bool use_once, const std::string& dir) {
  auto store = open_store(a, policy, dir + "/flash-" + policy + (use_once ? "-u" : "-p") + ".dat");
  std::vector<std::string> hot, scan;
  const std::string value(static_cast<size_t>(a.chunk), 'v');
  for (int i = 0; i < a.hot; ++i) hot.push_back(fmt::format("hot:{}", i));
  for (int i = 0; i < a.scan; ++i) scan.push_back(fmt::format("scan:{}", i));
  for (const auto* keys : {&hot, &scan}) {
    for (const std::string& k : *keys) {
      if (!store->put(k, value)) exit(1);
      // Written down and forgotten in batches, so memory never fills.
      if (tierkv::StoreTiers::memory(*store).object_count() >=
          static_cast<uint64_t>(a.memory_chunks / 2)) {
        if (!store->persist_all().is_ok()) exit(1);
        for (const std::string& h : hot) tierkv::StoreTiers::memory(*store).remove(h);
        for (const std::string& s : scan) tierkv::StoreTiers::memory(*store).remove(s);
      }
    }
  }
  if (!store->persist_all().is_ok()) exit(1);
  for (const std::string& h : hot) tierkv::StoreTiers::memory(*store).remove(h);
  for (const std::string& s : scan) tierkv::StoreTiers::memory(*store).remove(s);

  const int hot_reads = a.hot * a.reuse;
  uint64_t hits = 0, reads = 0;
  for (int t = 0; t < a.tokens; ++t) {
    auto stream = store->open_stream(
        scan, tierkv::StreamOptions{.depth = 8, .channels = 4, .use_once = use_once});
    int h = 0;
    for (int s = 0; s < a.scan; ++s) {
      if (use_once) {
        if (!stream->next()) exit(1);
      } else {
        read_hit(*store, scan[s]);
      }
      // Hot reads spread evenly over the scan.
      while (h < hot_reads &&
             static_cast<int64_t>(h) * a.scan <= static_cast<int64_t>(s) * hot_reads) {
        hits += read_hit(*store, hot[h % a.hot]);
        ++reads;
        ++h;
      }
    }
    for (; h < hot_reads; ++h, ++reads) hits += read_hit(*store, hot[h % a.hot]);
    // Let promotions of this token land before the next one.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double ideal = 1.0 - static_cast<double>(a.hot) / static_cast<double>(reads);
  fmt::print(
      "{{\"policy\": \"{}\", \"useonce\": {}, \"hot_reads\": {}, \"hot_hits\": {}, "
      "\"hit_ratio\": {:.4f}, \"ideal\": {:.4f}, \"evicted_chunks\": {}}}\n",
      policy, use_once ? "true" : "false", reads, hits,
      static_cast<double>(hits) / static_cast<double>(reads), ideal,
      store->stats().memory.evicted_chunks);
  fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"tierkv scan-resistance benchmark (in-process)"};
  app.add_option("--memory-chunks", a.memory_chunks, "chunks memory holds");
  app.add_option("--hot", a.hot, "hot-set chunks");
  app.add_option("--reuse", a.reuse, "reads of each hot chunk per token");
  app.add_option("--scan", a.scan, "use-once chunks streamed past per token");
  app.add_option("--tokens", a.tokens, "tokens");
  app.add_option("--chunk", a.chunk, "chunk (and value) size");
  app.add_option("--policies", a.policies, "eviction policies")->delimiter(',');
  app.add_option("--dir", a.dir, "directory for the flash files");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);  // stdout carries the results
  std::string templ = a.dir + "/tierkv-scan-XXXXXX";
  const std::string dir = ::mkdtemp(templ.data());
  for (const std::string& p : a.policies) {
    for (bool use_once : {true, false}) run(a, p, use_once, dir);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
