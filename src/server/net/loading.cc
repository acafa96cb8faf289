#include "server/net/loading.h"

#include <fmt/format.h>

#include <algorithm>

namespace tierkv::server {
namespace {

std::string_view source_name(const LoadingFigures& f) {
  if (!f.loading && !f.flash) return "none";
  return f.from_snapshot ? "snapshot" : "scan";
}

}  // namespace

// As Redis 7's INFO: the percentage of the total, and an ETA from the
// whole-second time elapsed (1 in the first second, for want of a rate).
LoadingFigures loading_progress_figures(const LoadProgress& p, int64_t now_ms) {
  LoadingFigures f;
  f.loading = p.loading;
  f.from_snapshot = p.from_snapshot;
  f.start_time_s = (p.start_ms > 0 ? p.start_ms : now_ms) / 1000;
  f.loaded_bytes = p.bytes_done;
  f.total_bytes = p.bytes_total;
  uint64_t remaining = 1;  // Redis's figure while the total is unknown
  if (f.total_bytes > 0) {
    f.loaded_perc = static_cast<double>(f.loaded_bytes) / static_cast<double>(f.total_bytes) * 100;
    remaining = f.total_bytes - std::min(f.loaded_bytes, f.total_bytes);
  }
  int64_t elapsed_s = std::max<int64_t>(0, now_ms / 1000 - f.start_time_s);
  f.eta_seconds = elapsed_s == 0 ? 1
                                 : static_cast<int64_t>(static_cast<uint64_t>(elapsed_s) *
                                                        remaining / (f.loaded_bytes + 1));
  return f;
}

LoadingFigures loading_figures(Store& store, int64_t now_ms) {
  LoadProgress p = store.load_progress();
  LoadingFigures f = loading_progress_figures(p, now_ms);
  if (f.loading) return f;
  if (!store.has_flash()) return f;
  const RecoveryStats r = store.stats().recovery;
  f.flash = true;
  f.recovery_duration_us = r.duration_us;
  f.recovery_bytes = p.bytes_done;
  f.recovery_objects = r.objects;
  f.recovery_rate_mb_s =
      r.duration_us > 0 ? static_cast<double>(p.bytes_done) / static_cast<double>(r.duration_us)
                        : 0.0;
  return f;
}

void render_persistence(const LoadingFigures& f, std::string& out) {
  out += "# Persistence\r\n";
  out += fmt::format("loading:{}\r\n", f.loading ? 1 : 0);
  out += "async_loading:0\r\n";
  if (f.loading) {
    out += fmt::format("loading_start_time:{}\r\n", f.start_time_s);
    out += fmt::format("loading_total_bytes:{}\r\n", f.total_bytes);
    out += fmt::format("loading_loaded_bytes:{}\r\n", f.loaded_bytes);
    out += fmt::format("loading_loaded_perc:{:.2f}\r\n", f.loaded_perc);
    out += fmt::format("loading_eta_seconds:{}\r\n", f.eta_seconds);
  }
  out += fmt::format("loading_source:{}\r\n", source_name(f));
  if (!f.flash) return;
  out += fmt::format("recovery_duration_ms:{}\r\n", f.recovery_duration_us / 1000);
  out += fmt::format("recovery_bytes:{}\r\n", f.recovery_bytes);
  out += fmt::format("recovery_rate_mb_s:{:.1f}\r\n", f.recovery_rate_mb_s);
  out += fmt::format("recovery_objects:{}\r\n", f.recovery_objects);
}

std::string loading_done_line(const LoadingFigures& f) {
  return fmt::format("flash index loaded from {}: {} objects, {} bytes in {:.3f} s ({:.0f} MB/s)",
                     source_name(f), f.recovery_objects, f.recovery_bytes,
                     static_cast<double>(f.recovery_duration_us) / 1e6, f.recovery_rate_mb_s);
}

std::string loading_progress_line(const LoadingFigures& f) {
  return fmt::format("loading the flash index ({}): {:.2f}% of {} bytes, ETA {} s", source_name(f),
                     f.loaded_perc, f.total_bytes, f.eta_seconds);
}

LoadingGauges::LoadingGauges(MetricsRegistry& m)
    : loading_(m.gauge("tierkv_loading",
                       "1 while the flash index loads (data commands answer -LOADING)")),
      from_snapshot_(m.gauge("tierkv_loading_from_snapshot",
                             "1 if the index loads or loaded from the clean-shutdown snapshot, "
                             "0 if by scanning the device")),
      loaded_bytes_(m.gauge("tierkv_loading_loaded_bytes", "bytes of the index load done")),
      total_bytes_(m.gauge("tierkv_loading_total_bytes", "bytes the index load reads in all")),
      eta_seconds_(m.gauge("tierkv_loading_eta_seconds", "estimated seconds left of the load")),
      recovery_duration_(m.gauge("tierkv_recovery_duration_seconds",
                                 "duration of the last index load", "", 1000000)),
      recovery_bytes_(m.gauge("tierkv_recovery_bytes", "bytes the last index load read")),
      recovery_objects_(m.gauge("tierkv_recovery_objects", "objects the last index load found")),
      recovery_rate_(m.gauge("tierkv_recovery_rate_bytes_per_second",
                             "bytes per second of the last index load")) {}

void LoadingGauges::publish(const LoadingFigures& f) {
  loading_.set(f.loading ? 1 : 0);
  from_snapshot_.set(f.from_snapshot ? 1 : 0);
  loaded_bytes_.set(static_cast<int64_t>(f.loaded_bytes));
  total_bytes_.set(static_cast<int64_t>(f.total_bytes));
  eta_seconds_.set(f.loading ? f.eta_seconds : 0);
  recovery_duration_.set(static_cast<int64_t>(f.recovery_duration_us));
  recovery_bytes_.set(static_cast<int64_t>(f.recovery_bytes));
  recovery_objects_.set(static_cast<int64_t>(f.recovery_objects));
  recovery_rate_.set(static_cast<int64_t>(f.recovery_rate_mb_s * 1e6));
}

}  // namespace tierkv::server
