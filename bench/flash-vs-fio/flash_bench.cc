// tierkv-flash-bench: fills a FlashTier file with same-sized objects, then
// reads random ones through FlashTier::read_chunk with a fixed queue depth.
// Results are JSON lines on stdout (one per phase); progress goes to stderr.
//
//   tierkv-flash-bench --dir /data/bench --block-size 64k --qd 1,16 --seconds 5
//
// With --serve it fills, then takes commands on stdin, one per line, so a
// driver (run.py) can run fio on the same file between the cases:
//   read <queue depth> <seconds>     one case, answered with a JSON line
//   quit                             close the tier, delete the file, exit
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "read_runner.h"

namespace {

using tierkv::bench::FillResult;
using tierkv::bench::FillSpec;
using tierkv::bench::ReadResult;
using tierkv::bench::ReadSpec;
using tierkv::flash::FlashTier;

struct Options {
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
uint64_t parse_size(const std::string& text) {
  size_t used = 0;
  uint64_t n = 0;
  try {
    n = std::stoull(text, &used);
  } catch (const std::exception&) {
    return 0;
  }
  const std::string unit = text.substr(used);
  if (unit.empty()) return n;
  if (unit == "k" || unit == "K") return n << 10;
  if (unit == "m" || unit == "M") return n << 20;
  return 0;
}

void print_fill(const FlashTier& tier, const FillSpec& spec, const FillResult& fill) {
  const tierkv::flash::FlashStats s = tier.stats();
  const uint64_t written_extent = s.regions_used * (tier.capacity() / s.regions);
  std::printf(
      "{\"event\":\"fill\",\"file\":\"%s\",\"direct_io\":%s,\"io_backend\":\"%.*s\","
      "\"capacity_bytes\":%llu,\"region_bytes\":%llu,\"regions_used\":%llu,"
      "\"written_extent_bytes\":%llu,\"chunk_size\":%llu,\"chunks_per_object\":%u,"
      "\"key_length\":%u,\"objects\":%llu,\"chunks\":%llu,\"index_bytes\":%llu,"
      "\"index_bytes_per_chunk\":%.2f,\"index_bytes_per_object\":%.2f,"
      "\"device_write_bytes\":%llu,\"user_write_bytes\":%llu,\"write_amplification\":%.4f,"
      "\"fill_seconds\":%.3f,\"fill_mb_s\":%.1f,\"busy_retries\":%llu,\"write_errors\":%llu,"
      "\"reclaims\":%llu}\n",
      tier.file_path().c_str(), tier.direct_io() ? "true" : "false",
      static_cast<int>(tier.io_backend().size()), tier.io_backend().data(),
      static_cast<unsigned long long>(s.capacity_bytes),
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

void print_read(const FillSpec& spec, const ReadResult& r, bool verbose) {
  std::printf(
      "{\"event\":\"read\",\"chunk_size\":%llu,\"queue_depth\":%u,\"seconds\":%.3f,"
      "\"ops\":%llu,\"ops_s\":%.1f,\"payload_mb_s\":%.2f,\"device_mb_s\":%.2f,"
      "\"errors\":%llu,\"cpu_percent\":%.1f,\"cpu_us_per_op\":%.2f,"
      "\"lat_p50_us\":%.1f,\"lat_p99_us\":%.1f,\"lat_max_us\":%.1f}\n",
      static_cast<unsigned long long>(spec.chunk_size), r.queue_depth, r.seconds,
      static_cast<unsigned long long>(r.ops), double(r.ops) / r.seconds,
      double(r.payload_bytes) / 1e6 / r.seconds, double(r.device_bytes) / 1e6 / r.seconds,
      static_cast<unsigned long long>(r.errors), 100.0 * r.cpu_seconds / r.seconds,
      r.ops ? r.cpu_seconds * 1e6 / double(r.ops) : 0.0, double(r.p50_ns) / 1e3,
      double(r.p99_ns) / 1e3, double(r.max_ns) / 1e3);
  std::fflush(stdout);
  if (!verbose) return;
  std::fprintf(stderr, "  bs=%llu qd=%u: %.0f ops/s, %.1f MB/s payload, p50 %.0f us, %llu errors\n",
               static_cast<unsigned long long>(spec.chunk_size), r.queue_depth,
               double(r.ops) / r.seconds, double(r.payload_bytes) / 1e6 / r.seconds,
               double(r.p50_ns) / 1e3, static_cast<unsigned long long>(r.errors));
}

ReadResult read_case(FlashTier& tier, const FillSpec& fill, const Options& o, uint32_t qd,
                     double seconds) {
  ReadSpec spec{.queue_depth = qd, .seconds = seconds, .warmup_seconds = o.warmup};
  return tierkv::bench::random_reads(tier, fill, spec);
}

// Answers "read <qd> <seconds>" lines until "quit" or end of input.
int serve(FlashTier& tier, const FillSpec& fill, const Options& o) {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "quit") break;
    uint32_t qd = 0;
    double seconds = 0;
    if (command != "read" || !(in >> qd >> seconds) || qd == 0 || qd > o.tier_queue_depth ||
        seconds <= 0) {
      std::printf("{\"event\":\"error\",\"message\":\"bad command\"}\n");
      std::fflush(stdout);
      continue;
    }
    print_read(fill, read_case(tier, fill, o, qd, seconds), false);
  }
  return 0;
}

int run(const Options& o) {
  FillSpec fill_spec;
  fill_spec.chunk_size = parse_size(o.block_size);
  fill_spec.chunks_per_object = o.chunks_per_object;
  fill_spec.key_length = o.key_length;
  if (fill_spec.chunk_size == 0 || fill_spec.chunk_size > (uint64_t{16} << 20)) {
    std::fprintf(stderr, "bad --block-size %s\n", o.block_size.c_str());
    return 2;
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

  tierkv::flash::FlashOptions fo;
  fo.path = path;
  fo.size = o.size_mib << 20;
  fo.region_size = o.region_mib << 20;
  fo.queue_depth = o.tier_queue_depth;
  fo.direct_io = !o.buffered;
  fo.io_backend = o.backend == "uring"     ? tierkv::flash::IoBackend::kUring
                  : o.backend == "threads" ? tierkv::flash::IoBackend::kThreadPool
                                           : tierkv::flash::IoBackend::kAuto;
  int rc = 0;
  {
    auto tier = FlashTier::open(fo);
    if (!tier.is_ok()) {
      std::fprintf(stderr, "open: %s\n", tier.status().to_string().c_str());
      return 1;
    }
    fill_spec.objects = tierkv::bench::objects_that_fit(**tier, fill_spec);
    if (!o.serve)
      std::fprintf(stderr, "filling %s: %llu objects of %u x %llu bytes\n", path.c_str(),
                   static_cast<unsigned long long>(fill_spec.objects), fill_spec.chunks_per_object,
                   static_cast<unsigned long long>(fill_spec.chunk_size));
    auto filled = tierkv::bench::fill(**tier, fill_spec);
    if (!filled.is_ok()) {
      std::fprintf(stderr, "fill: %s\n", filled.status().to_string().c_str());
      rc = 1;
    } else {
      print_fill(**tier, fill_spec, *filled);
      if (o.serve) {
        rc = serve(**tier, fill_spec, o);
      } else {
        for (uint32_t qd : o.queue_depths)
          print_read(fill_spec, read_case(**tier, fill_spec, o, qd, o.seconds), true);
      }
    }
  }
  if (!o.keep) std::filesystem::remove(path, ec);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Random reads through tierkv's flash tier (compare with fio: run.py)"};
  app.add_option("--dir", o.dir, "directory for the flash file (on the disk under test)");
  app.add_option("--size-mib", o.size_mib, "flash file size in MiB");
  app.add_option("--region-mib", o.region_mib, "flash region size in MiB");
  app.add_option("--block-size", o.block_size, "object chunk size: 4k, 64k, 1m, or bytes");
  app.add_option("--chunks-per-object", o.chunks_per_object, "chunks per object")
      ->check(CLI::Range(1, 65535));
  app.add_option("--key-length", o.key_length, "key length in bytes (>= 20)");
  app.add_option("--qd", o.queue_depths, "queue depths to run (without --serve)")->delimiter(',');
  app.add_option("--seconds", o.seconds, "measured seconds per case");
  app.add_option("--warmup", o.warmup, "unmeasured seconds before each case");
  app.add_option("--tier-queue-depth", o.tier_queue_depth, "FlashOptions::queue_depth");
  app.add_option("--backend", o.backend, "I/O backend")
      ->check(CLI::IsMember({"auto", "uring", "threads"}));
  app.add_flag("--buffered", o.buffered, "do not ask for O_DIRECT");
  app.add_flag("--serve", o.serve, "after the fill, take read commands on stdin");
  app.add_flag("--keep", o.keep, "keep the flash file at exit");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_default_logger(spdlog::stderr_color_mt("stderr"));
  spdlog::set_level(spdlog::level::warn);
  return run(o);
}
