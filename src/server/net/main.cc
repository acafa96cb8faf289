// tierkv-server: the Redis-protocol server. Configuration comes from the
// defaults, an optional TOML file (--config) and --<key> flags.
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

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
//
// The heap grows 64 MiB at a time (M_TOP_PAD), so that with huge pages (below)
// it grows in whole huge pages; untouched, the pad costs no memory.
void tune_allocator() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
}

// The kernel gives transparent huge pages on request (madvise mode), and
// glibc would ask for them if its malloc.hugetlb tunable were set. Loading
// an index of 10 M flash objects faulted in 50,000 pages of 4 KiB and took
// a second on a VM; on huge pages it took 0.2-0.5 s.
bool huge_pages_on_request() {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f == nullptr) return false;
  char mode[128] = {};
  const bool read = std::fgets(mode, sizeof(mode), f) != nullptr;
  std::fclose(f);
  return read && std::strstr(mode, "[madvise]") != nullptr;
}

// glibc reads GLIBC_TUNABLES only when a program starts: set it and run this
// program again, in this process (the pid, descriptors and arguments stay).
// Done before any thread or file exists. An operator's own hugetlb setting
// is kept, and so is a failed exec: the server then runs without.
void exec_with_huge_pages(char** argv) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  (void)argv;  // the sanitizers' allocators ignore glibc's tunables
#else
  const char* set = std::getenv("GLIBC_TUNABLES");
  std::string tunables = set ? set : "";
  if (tunables.find("glibc.malloc.hugetlb") != std::string::npos || !huge_pages_on_request())
    return;
  tunables += tunables.empty() ? "glibc.malloc.hugetlb=1" : ":glibc.malloc.hugetlb=1";
  ::setenv("GLIBC_TUNABLES", tunables.c_str(), 1);
  // By its path where it still has one, not /proc/self/exe: the kernel
  // names the process after the file it runs (ps, top and pkill would see
  // "exe"). A binary replaced on disk runs on as itself.
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) ::execv(self.c_str(), argv);
  ::execv("/proc/self/exe", argv);
  spdlog::warn("could not re-execute with huge pages ({}); running without", std::strerror(errno));
#endif
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
  if (config->malloc_huge_pages) exec_with_huge_pages(argv);
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
