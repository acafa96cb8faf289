// tierkv-flash-bench: fills a flash file with same-sized objects, then reads
// random ones with a fixed queue depth. Results are JSON lines on stdout (one
// per phase); progress goes to stderr.
//
//   tierkv-flash-bench --dir /data/bench --block-size 64k --qd 1,16 --seconds 5
//
// --mode store (default): a tierkv::Store with tiny memory, filled by put()
// and emptied of memory copies, read through Store::read — every read comes
// from flash the way a GET does. Its FlashTier can also be read directly
// ("tier" reads) from the same fill. --mode tier: a bare FlashTier filled by
// write_chunk (no Store), for the I/O backend knobs.
//
// With --serve it fills, then takes commands on stdin, one per line, so a
// driver (run.py) can run fio on the same file between the cases:
//   read <queue depth> <seconds> [store|tier]   one case, one JSON line back
//   quit                                        close, delete the file, exit
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "read_runner.h"
#include "store/store_tiers.h"
#include "store_runner.h"

namespace {

using tierkv::Store;
using tierkv::bench::FillResult;
using tierkv::bench::FillSpec;
using tierkv::bench::ReadResult;
using tierkv::bench::ReadSpec;
using tierkv::flash::FlashTier;

struct Options {
  std::string mode = "store";
  uint64_t memory_mib = 8;
  std::string dir = "bench/results/tmp-flash";
  uint64_t size_mib = 1024;
  uint64_t region_mib = 64;
  std::string block_size = "4k";
  uint32_t chunks_per_object = 1;
  uint32_t key_length = 24;
  std::vector<uint32_t> queue_depths = {1, 16};
  double seconds = 5;
  double warmup = 0.5;
  uint32_t tier_queue_depth = 64;
  std::string backend = "auto";
  bool buffered = false;
  bool serve = false;
  bool keep = false;
};

// "4096", "4k", "64K", "1m" -> bytes; 0 if malformed.
void print_fill(const FlashTier& tier, const FillSpec& spec, const FillResult& fill,
                const std::string& mode, uint64_t memory_objects) {
  const tierkv::flash::FlashStats s = tier.stats();
  const uint64_t written_extent = s.regions_used * (tier.capacity() / s.regions);
  std::printf(
      "{\"event\":\"fill\",\"mode\":\"%s\",\"memory_objects_after\":%llu,\"file\":\"%s\",\"direct_"
      "io\":%s,\"io_backend\":\"%.*s\","
      "\"capacity_bytes\":%llu,\"region_bytes\":%llu,\"regions_used\":%llu,"
      "\"written_extent_bytes\":%llu,\"chunk_size\":%llu,\"chunks_per_object\":%u,"
      "\"key_length\":%u,\"objects\":%llu,\"chunks\":%llu,\"index_bytes\":%llu,"
      "\"index_bytes_per_chunk\":%.2f,\"index_bytes_per_object\":%.2f,"
      "\"device_write_bytes\":%llu,\"user_write_bytes\":%llu,\"write_amplification\":%.4f,"
      "\"fill_seconds\":%.3f,\"fill_mb_s\":%.1f,\"busy_retries\":%llu,\"write_errors\":%llu,"
      "\"reclaims\":%llu}\n",
      mode.c_str(), static_cast<unsigned long long>(memory_objects), tier.file_path().c_str(),
      tier.direct_io() ? "true" : "false", static_cast<int>(tier.io_backend().size()),
      tier.io_backend().data(), static_cast<unsigned long long>(s.capacity_bytes),
      static_cast<unsigned long long>(tier.capacity() / s.regions),
      static_cast<unsigned long long>(s.regions_used),
      static_cast<unsigned long long>(written_extent),
      static_cast<unsigned long long>(spec.chunk_size), spec.chunks_per_object, spec.key_length,
      static_cast<unsigned long long>(s.objects), static_cast<unsigned long long>(s.chunks),
      static_cast<unsigned long long>(s.index_bytes),
      s.chunks ? double(s.index_bytes) / double(s.chunks) : 0.0,
      s.objects ? double(s.index_bytes) / double(s.objects) : 0.0,
      static_cast<unsigned long long>(s.device_write_bytes),
      static_cast<unsigned long long>(s.user_write_bytes), s.write_amplification, fill.seconds,
      double(fill.payload_bytes) / 1e6 / fill.seconds,
      static_cast<unsigned long long>(fill.busy_retries),
      static_cast<unsigned long long>(fill.write_errors),
      static_cast<unsigned long long>(s.reclaims));
  std::fflush(stdout);
}

void print_read(const FillSpec& spec, const std::string& path, const ReadResult& r, bool verbose) {
  std::printf(
      "{\"event\":\"read\",\"path\":\"%s\",\"object_size\":%llu,\"chunk_size\":%llu,"
      "\"queue_depth\":%u,\"memory_hits\":%llu,\"seconds\":%.3f,"
      "\"ops\":%llu,\"ops_s\":%.1f,\"payload_mb_s\":%.2f,\"device_mb_s\":%.2f,"
      "\"errors\":%llu,\"cpu_percent\":%.1f,\"cpu_us_per_op\":%.2f,"
      "\"lat_p50_us\":%.1f,\"lat_p99_us\":%.1f,\"lat_max_us\":%.1f}\n",
      path.c_str(), static_cast<unsigned long long>(spec.object_size()),
      static_cast<unsigned long long>(spec.chunk_size), r.queue_depth,
      static_cast<unsigned long long>(r.memory_hits), r.seconds,
      static_cast<unsigned long long>(r.ops), double(r.ops) / r.seconds,
      double(r.payload_bytes) / 1e6 / r.seconds, double(r.device_bytes) / 1e6 / r.seconds,
      static_cast<unsigned long long>(r.errors), 100.0 * r.cpu_seconds / r.seconds,
      r.ops ? r.cpu_seconds * 1e6 / double(r.ops) : 0.0, double(r.p50_ns) / 1e3,
      double(r.p99_ns) / 1e3, double(r.max_ns) / 1e3);
  std::fflush(stdout);
  if (!verbose) return;
  std::fprintf(stderr,
               "  %s bs=%llu qd=%u: %.0f ops/s, %.1f MB/s payload, p50 %.0f us, %llu errors\n",
               path.c_str(), static_cast<unsigned long long>(spec.object_size()), r.queue_depth,
               double(r.ops) / r.seconds, double(r.payload_bytes) / 1e6 / r.seconds,
               double(r.p50_ns) / 1e3, static_cast<unsigned long long>(r.errors));
}

// What reads can go through: the store (null in --mode tier) and its tier.
struct Target {
  Store* store = nullptr;
  FlashTier* tier = nullptr;
};

ReadResult read_case(const Target& t, const std::string& path, const FillSpec& fill,
                     const Options& o, uint32_t qd, double seconds) {
  ReadSpec spec{.queue_depth = qd, .seconds = seconds, .warmup_seconds = o.warmup};
  if (path == "store") return tierkv::bench::random_store_reads(*t.store, fill, spec);
  return tierkv::bench::random_tier_reads(*t.tier, fill, spec);
}

// Answers "read <qd> <seconds> [store|tier]" lines until "quit" or end of input.
int serve(const Target& t, const FillSpec& fill, const Options& o) {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "quit") break;
    uint32_t qd = 0;
    double seconds = 0;
    std::string path;
    const bool parsed = command == "read" && (in >> qd >> seconds);
    if (!(in >> path)) path = t.store ? "store" : "tier";
    if (!parsed || qd == 0 || qd > o.tier_queue_depth || seconds <= 0 ||
        (path != "tier" && !(path == "store" && t.store))) {
      std::printf("{\"event\":\"error\",\"message\":\"bad command\"}\n");
      std::fflush(stdout);
      continue;
    }
    print_read(fill, path, read_case(t, path, fill, o, qd, seconds), false);
  }
  return 0;
}

// Fills, then reads (serve or the --qd list). `tier` belongs to `store` if
// there is one.
int fill_and_read(const Target& t, FillSpec& spec, const Options& o) {
  // Every region but two: the fill never wraps the log (the store's
  // offloads and the final persist may leave a region partly used).
  const uint64_t regions = t.tier->stats().regions;
  spec.objects = tierkv::bench::objects_that_fit(*t.tier, spec, regions > 2 ? regions - 2 : 1);
  if (!o.serve)
    std::fprintf(stderr, "filling %s (%s): %llu objects of %u x %llu bytes\n",
                 t.tier->file_path().c_str(), o.mode.c_str(),
                 static_cast<unsigned long long>(spec.objects), spec.chunks_per_object,
                 static_cast<unsigned long long>(spec.chunk_size));
  auto filled =
      t.store ? tierkv::bench::fill_store(*t.store, spec) : tierkv::bench::fill(*t.tier, spec);
  if (!filled.is_ok()) {
    std::fprintf(stderr, "fill: %s\n", filled.status().to_string().c_str());
    return 1;
  }
  print_fill(*t.tier, spec, *filled, o.mode, t.store ? t.store->stats().memory.objects : 0);
  if (o.serve) return serve(t, spec, o);
  for (uint32_t qd : o.queue_depths)
    print_read(spec, o.mode, read_case(t, o.mode, spec, o, qd, o.seconds), true);
  return 0;
}

tierkv::Config store_config(const Options& o, const std::string& path, uint64_t object_size) {
  tierkv::Config c;
  c.chunk_size = int64_t{1} << 20;
  // Tiny, so nothing stays; big enough to take one object while it is put.
  c.memory = static_cast<int64_t>(std::max<uint64_t>(o.memory_mib << 20, 3 * object_size));
  c.flash_path = path;
  c.flash_size = static_cast<int64_t>(o.size_mib << 20);
  c.region_size = static_cast<int64_t>(o.region_mib << 20);
  c.flash_queue_depth = o.tier_queue_depth;
  c.promotion_threshold = 255;  // the most flash hits before a promotion
  c.active_expire_hz = 0;
  c.log_level = tierkv::LogLevel::kWarn;
  return c;
}

int run(const Options& o) {
  FillSpec fill_spec;
  tierkv::Result<int64_t> block_bytes = tierkv::parse_byte_size(o.block_size);
  const uint64_t block = block_bytes ? static_cast<uint64_t>(*block_bytes) : 0;
  fill_spec.chunk_size = block;
  fill_spec.chunks_per_object = o.chunks_per_object;
  fill_spec.key_length = o.key_length;
  if (block == 0 || block > (uint64_t{64} << 20)) {
    std::fprintf(stderr, "bad --block-size %s\n", o.block_size.c_str());
    return 2;
  }
  if (o.mode == "store") {
    // --block-size is the object size; the store cuts it into 1 MiB chunks.
    fill_spec.chunk_size = std::min<uint64_t>(block, uint64_t{1} << 20);
    fill_spec.chunks_per_object = static_cast<uint32_t>(block / fill_spec.chunk_size);
    if (block % fill_spec.chunk_size != 0 || o.chunks_per_object != 1) {
      std::fprintf(stderr,
                   "--mode store: --block-size must be a multiple of 1m above 1m, "
                   "and --chunks-per-object 1\n");
      return 2;
    }
  }
  for (uint32_t qd : o.queue_depths) {
    if (qd == 0 || qd > o.tier_queue_depth) {
      std::fprintf(stderr, "--qd %u: must be 1..--tier-queue-depth (%u)\n", qd, o.tier_queue_depth);
      return 2;
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  if (ec) {
    std::fprintf(stderr, "cannot create %s: %s\n", o.dir.c_str(), ec.message().c_str());
    return 1;
  }
  // A fixed name: a file left by an interrupted run is replaced, not recovered.
  const std::string path = o.dir + "/flash-bench.dat";
  std::filesystem::remove(path, ec);

  int rc = 0;
  if (o.mode == "store") {
    auto store = Store::open(store_config(o, path, fill_spec.object_size()));
    if (!store.is_ok() || tierkv::StoreTiers::flash(**store) == nullptr) {
      std::fprintf(stderr, "open: %s\n",
                   store.is_ok() ? (*store)->flash_status().error.c_str()
                                 : store.status().to_string().c_str());
      std::filesystem::remove(path, ec);
      return 1;
    }
    rc = fill_and_read(Target{store->get(), tierkv::StoreTiers::flash(**store)}, fill_spec, o);
  } else {
    tierkv::flash::FlashOptions fo;
    fo.path = path;
    fo.size = o.size_mib << 20;
    fo.region_size = o.region_mib << 20;
    fo.queue_depth = o.tier_queue_depth;
    fo.direct_io = !o.buffered;
    fo.io_backend = o.backend == "uring"     ? tierkv::flash::IoBackend::kUring
                    : o.backend == "threads" ? tierkv::flash::IoBackend::kThreadPool
                                             : tierkv::flash::IoBackend::kAuto;
    auto tier = FlashTier::open(fo);
    if (!tier.is_ok()) {
      std::fprintf(stderr, "open: %s\n", tier.status().to_string().c_str());
      return 1;
    }
    rc = fill_and_read(Target{nullptr, tier->get()}, fill_spec, o);
  }
  if (!o.keep) std::filesystem::remove(path, ec);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Random flash reads through tierkv::Store or FlashTier (compare with fio: run.py)"};
  app.add_option("--mode", o.mode, "store: through tierkv::Store; tier: a bare FlashTier")
      ->check(CLI::IsMember({"store", "tier"}));
  app.add_option("--memory-mib", o.memory_mib, "--mode store: memory budget in MiB");
  app.add_option("--dir", o.dir, "directory for the flash file (on the disk under test)");
  app.add_option("--size-mib", o.size_mib, "flash file size in MiB");
  app.add_option("--region-mib", o.region_mib, "flash region size in MiB");
  app.add_option("--block-size", o.block_size,
                 "object size (tier mode: chunk size): 4k, 64k, 1m, 8m, or bytes");
  app.add_option("--chunks-per-object", o.chunks_per_object, "chunks per object (--mode tier)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--key-length", o.key_length, "key length in bytes (>= 20)");
  app.add_option("--qd", o.queue_depths, "queue depths to run (without --serve)")->delimiter(',');
  app.add_option("--seconds", o.seconds, "measured seconds per case");
  app.add_option("--warmup", o.warmup, "unmeasured seconds before each case");
  app.add_option("--tier-queue-depth", o.tier_queue_depth,
                 "FlashOptions::queue_depth (store: flash-queue-depth)");
  app.add_option("--backend", o.backend, "I/O backend (--mode tier)")
      ->check(CLI::IsMember({"auto", "uring", "threads"}));
  app.add_flag("--buffered", o.buffered, "do not ask for O_DIRECT (--mode tier)");
  app.add_flag("--serve", o.serve, "after the fill, take read commands on stdin");
  app.add_flag("--keep", o.keep, "keep the flash file at exit");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_default_logger(spdlog::stderr_color_mt("stderr"));
  spdlog::set_level(spdlog::level::warn);
  return run(o);
}
