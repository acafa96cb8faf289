// tierkv-server: the Redis-protocol server. Configuration comes from the
// defaults, an optional TOML file (--config) and --<key> flags.
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

#include "core/config.h"
#include "core/metrics.h"
#include "server/net/server.h"
#include "store/store.h"

namespace {

// Exits at once if the flash index still loads: nothing was written, and
// the next start loads again. Waiting for the load (the Store's destructor
// joins it) could take as long as the load itself.
void exit_if_loading(const tierkv::Store& store, int code) {
  if (!store.loading()) return;
  spdlog::info("exiting before the flash index finished loading");
  spdlog::shutdown();
  std::fflush(nullptr);
  std::_Exit(code);
}

// Memory chunks are up to chunk-size bytes (1 MiB by default). glibc
// serves blocks that large with mmap and unmaps them on free, so every SET
// of a large value faulted in fresh zeroed pages: a third of the server's
// CPU for 1 MiB SETs, and half their rate against redis (jemalloc reuses).
// From the heap they are reused; at most 64 MiB of freed heap is kept for
// that before glibc returns it. (32 MiB is glibc's largest mmap threshold.)
void tune_allocator() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  tierkv::Result<tierkv::Config> config = tierkv::load_config(argc, argv, "tierkv-server");
  if (!config) {
    bool help = config.status().code() == tierkv::StatusCode::kUnavailable;
    std::fprintf(help ? stdout : stderr, "%s\n", config.status().message().c_str());
    return help ? 0 : 2;
  }
  tierkv::server::apply_log_level(config->log_level);
  tune_allocator();

  tierkv::MetricsRegistry metrics;
  // The server answers at once; the flash index loads meanwhile (-LOADING).
  auto store = tierkv::Store::open(*config, &metrics, tierkv::OpenMode::kBackground);
  if (!store) {
    spdlog::error("cannot open the store: {}", store.status().to_string());
    return 1;
  }
  tierkv::server::Server server(*config, **store, metrics);
  if (tierkv::Status st = server.start(); !st.is_ok()) {
    spdlog::error("{}", st.to_string());
    exit_if_loading(**store, 1);
    return 1;
  }
  server.wait();
  exit_if_loading(**store, 0);
  if ((*store)->preheats().stuck()) {
    // Memory is on flash already; the store's destructor would wait for
    // the stuck job's worker.
    spdlog::warn("exiting without waiting for a stuck preheat job");
    spdlog::shutdown();
    std::fflush(nullptr);
    std::_Exit(0);
  }
  return 0;
}
