// What the server says about opening the store: while the flash index
// loads in the background (Store::open with OpenMode::kBackground), and the
// figures of the last recovery after it. One set of figures feeds INFO's
// "# Persistence" section, the gauges of /metrics and the log, so they
// always agree.
#pragma once

#include <cstdint>
#include <string>

#include "core/metrics.h"
#include "store/store.h"

namespace tierkv::server {

struct LoadingFigures {
  bool loading = false;
  bool flash = false;          // a flash tier is open (known once loading ended)
  bool from_snapshot = false;  // the index came from the snapshot of a clean shutdown
  // While loading, with Redis's meaning (INFO loading_* fields).
  int64_t start_time_s = 0;  // unix seconds
  uint64_t loaded_bytes = 0;
  uint64_t total_bytes = 0;
  double loaded_perc = 0;
  int64_t eta_seconds = 0;
  // The last recovery, once loading is over and flash is on.
  uint64_t recovery_duration_us = 0;
  uint64_t recovery_bytes = 0;
  uint64_t recovery_objects = 0;
  double recovery_rate_mb_s = 0;  // 10^6 bytes per second
};

// The figures of a load under way at `now_ms` (unix ms), with Redis 7's
// arithmetic for loading_loaded_perc and loading_eta_seconds.
LoadingFigures loading_progress_figures(const LoadProgress& p, int64_t now_ms);
// Everything, from the store (calls only what Store allows while loading).
LoadingFigures loading_figures(Store& store, int64_t now_ms);

// INFO "# Persistence".
void render_persistence(const LoadingFigures& f, std::string& out);
// "index loaded from scan: N objects, B bytes in S s (R MB/s)".
std::string loading_done_line(const LoadingFigures& f);
// "loading the flash index (scan): 43.00% of B bytes, ETA 3 s".
std::string loading_progress_line(const LoadingFigures& f);

// The same figures as gauges in the metrics registry, for /metrics.
class LoadingGauges {
 public:
  explicit LoadingGauges(MetricsRegistry& metrics);
  void publish(const LoadingFigures& f);

 private:
  Gauge& loading_;
  Gauge& from_snapshot_;
  Gauge& loaded_bytes_;
  Gauge& total_bytes_;
  Gauge& eta_seconds_;
  Gauge& recovery_duration_;
  Gauge& recovery_bytes_;
  Gauge& recovery_objects_;
  Gauge& recovery_rate_;
};

}  // namespace tierkv::server
