#include "cli/trace/mrc_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cli/trace/tier_replay.h"
#include "core/hash.h"
#include "store/sizing/miss_ratio_curves.h"

namespace tierkv::trace {

double MrcPoint::error() const {
  return std::abs(online - exact);
}

double MrcPoint::error_beyond_span() const {
  if (online < exact_low) return exact_low - online;
  if (online > exact_high) return online - exact_high;
  return 0;
}

double MrcCheck::max_error() const {
  double worst = 0;
  for (const MrcPoint& p : points) worst = std::max(worst, p.error());
  return worst;
}

double MrcCheck::max_error_beyond_span() const {
  double worst = 0;
  for (const MrcPoint& p : points) worst = std::max(worst, p.error_beyond_span());
  return worst;
}

namespace {

uint64_t objects_at(const DenseTrace& trace, double objects) {
  return std::max<uint64_t>(
      1, std::min<uint64_t>(trace.unique(), static_cast<uint64_t>(std::llround(objects))));
}

// The exact curve over the span the point may really model.
Status check_span(const DenseTrace& trace, const MrcOptions& o, MrcPoint& point) {
  point.exact_low = point.exact_high = point.exact;
  if (point.error() <= o.tolerance || point.size_error <= 0) return Status::ok();
  const auto capacity = static_cast<double>(point.capacity);
  for (double end : {1.0 - point.size_error, 1.0 + point.size_error}) {
    Result<ReplayResult> r =
        replay_through_tier(trace, o.policy, objects_at(trace, capacity * std::max(end, 0.0)));
    TIERKV_RETURN_IF_ERROR(r.status());
    point.exact_low = std::min(point.exact_low, r->miss_ratio());
    point.exact_high = std::max(point.exact_high, r->miss_ratio());
  }
  return Status::ok();
}

}  // namespace

Result<MrcCheck> check_mrc(const DenseTrace& trace, const MrcOptions& o) {
  const uint64_t charge = replay_object_charge();
  const auto base = std::max<size_t>(
      1, static_cast<size_t>(std::llround(o.base_fraction * static_cast<double>(trace.unique()))));
  SizingOptions sizing;
  sizing.sample_rate = o.sample_rate;
  sizing.max_bytes = o.max_bytes;
  sizing.memory_bytes = base * charge;
  sizing.policy = o.policy;
  MissRatioCurves curves(sizing);
  // What the server at 1x sees and tells its curves (Store::count_hit,
  // count_miss, count_write).
  Result<ReplayResult> served =
      replay_through_tier(trace, o.policy, base, [&](std::string_view key, bool hit) {
        const uint64_t h = hash64(key);
        curves.read(h, hit ? charge : 0);
        if (!hit) curves.write(h, charge);
      });
  TIERKV_RETURN_IF_ERROR(served.status());
  const MissRatioCurves::Curves online = curves.curves();
  MrcCheck check;
  check.final_rate = online.sample_rate;
  for (const MissRatioCurves::Point& p : online.memory) {
    MrcPoint point;
    point.scale = p.scale;
    point.capacity = objects_at(trace, p.scale * static_cast<double>(base));
    point.online = p.miss_ratio;
    point.size_error = p.size_error;
    Result<ReplayResult> exact = replay_through_tier(trace, o.policy, point.capacity);
    TIERKV_RETURN_IF_ERROR(exact.status());
    point.exact = exact->miss_ratio();
    TIERKV_RETURN_IF_ERROR(check_span(trace, o, point));
    check.points.push_back(point);
  }
  return check;
}

std::string format_mrc(const std::string& trace_name, const MrcCheck& check) {
  std::string out = fmt::format(
      "{} (sampling rate at the end {:.4f}; max error {:.4f}, beyond the size span {:.4f})\n",
      trace_name, check.final_rate, check.max_error(), check.max_error_beyond_span());
  out += "  scale   objects   online    exact    error   size+-   exact over the span   beyond\n";
  for (const MrcPoint& p : check.points) {
    out += fmt::format("  {:>5}x {:>9} {:>8.4f} {:>8.4f} {:>8.4f} {:>7.1f}%", p.scale, p.capacity,
                       p.online, p.exact, p.error(), 100 * p.size_error);
    if (p.exact_low != p.exact_high)
      out += fmt::format("   {:.4f} .. {:.4f}   {:>8.4f}", p.exact_low, p.exact_high,
                         p.error_beyond_span());
    out += "\n";
  }
  return out;
}

}  // namespace tierkv::trace
