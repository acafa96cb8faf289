// tierkv-server: the Redis-protocol server. Configuration comes from the
// defaults, an optional TOML file (--config) and --<key> flags.
#include <spdlog/spdlog.h>

#include <cstdio>

#include "core/config.h"
#include "core/metrics.h"
#include "server/server.h"
#include "store/store.h"

int main(int argc, char** argv) {
  tierkv::Result<tierkv::Config> config = tierkv::load_config(argc, argv, "tierkv-server");
  if (!config) {
    bool help = config.status().code() == tierkv::StatusCode::kUnavailable;
    std::fprintf(help ? stdout : stderr, "%s\n", config.status().message().c_str());
    return help ? 0 : 2;
  }
  tierkv::server::apply_log_level(config->log_level);

  tierkv::MetricsRegistry metrics;
  auto store = tierkv::Store::open(*config, &metrics);
  if (!store) {
    spdlog::error("cannot open the store: {}", store.status().to_string());
    return 1;
  }
  tierkv::server::Server server(*config, **store, metrics);
  if (tierkv::Status st = server.start(); !st.is_ok()) {
    spdlog::error("{}", st.to_string());
    return 1;
  }
  server.wait();
  return 0;
}
