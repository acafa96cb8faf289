#include "cli/trace/mrc_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cli/trace/tier_replay.h"
#include "core/hash.h"
#include "store/sizing/miss_ratio_curves.h"

namespace tierkv::trace {

double MrcCheck::max_error() const {
  double worst = 0;
  for (const MrcPoint& p : points) worst = std::max(worst, std::abs(p.online - p.exact));
  return worst;
}

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
    point.capacity = std::max<uint64_t>(
        1, std::min<uint64_t>(trace.unique(), static_cast<uint64_t>(std::llround(
                                                  p.scale * static_cast<double>(base)))));
    point.online = p.miss_ratio;
    Result<ReplayResult> exact = replay_through_tier(trace, o.policy, point.capacity);
    TIERKV_RETURN_IF_ERROR(exact.status());
    point.exact = exact->miss_ratio();
    check.points.push_back(point);
  }
  return check;
}

std::string format_mrc(const std::string& trace_name, const MrcCheck& check) {
  std::string out = fmt::format("{} (sampling rate at the end {:.4f}; max error {:.4f})\n",
                                trace_name, check.final_rate, check.max_error());
  out += "  scale   objects   online    exact    error\n";
  for (const MrcPoint& p : check.points)
    out += fmt::format("  {:>5}x {:>9} {:>8.4f} {:>8.4f} {:>8.4f}\n", p.scale, p.capacity, p.online,
                       p.exact, std::abs(p.online - p.exact));
  return out;
}

}  // namespace tierkv::trace
