// INFO: the server's figures in Redis's "# Section\r\nkey:value\r\n" format.
// The same numbers feed /metrics (http_metrics.cc), so both always agree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/version.h"

namespace tierkv::server {

// The versions INFO and HELLO report (core/version.h).
using tierkv::kRedisCompatVersion;
using tierkv::kTierkvVersion;

class Server;

// `section` is empty or "default", "all", "everything", or one section name
// (case-insensitive). An unknown section gives an empty string, like Redis.
std::string render_info(Server& server, std::string_view section);

// Memory and key-space gauges shared by INFO and /metrics.
struct MemoryFigures {
  int64_t used_bytes = 0;
  int64_t budget_bytes = 0;
  int64_t leased_bytes = 0;
  int64_t dirty_bytes = 0;  // in memory only, not yet on flash
  int64_t index_bytes = 0;
  uint64_t objects = 0;
  uint64_t chunks = 0;
  uint64_t evicted_objects = 0;
  uint64_t evicted_chunks = 0;
  uint64_t expired_objects = 0;
  int64_t buffer_pool_idle_bytes = 0;  // chunk buffers kept mapped for reuse
  uint64_t buffer_pool_reused = 0;
  uint64_t buffer_pool_fresh = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  int64_t rss_bytes = 0;
};
MemoryFigures memory_figures(Server& server);

// Cluster-mode figures shared by INFO cluster and /metrics (the refusal and
// migrated-keys counters are in the registry already).
struct ClusterFigures {
  bool up = false;
  uint64_t map_version = 0, slots_owned = 0;
  uint64_t lease_renewals = 0, registrations = 0, etcd_round_trips = 0, etcd_failures = 0;
  uint64_t keys_purged = 0;
  const char* controller = "off";  // leading, standing or off
  uint64_t controller_maps_written = 0;
  uint64_t bytes_migrated_out = 0, keys_migration_dropped = 0, slots_migrating_out = 0;
  uint64_t migration_passes = 0, migration_retries = 0;
  double migration_progress = 0;
  uint64_t migration_last_pass_ms = 0, migration_last_pass_bytes = 0;
};
// Nullopt with cluster mode off.
std::optional<ClusterFigures> cluster_figures(Server& server);

}  // namespace tierkv::server
