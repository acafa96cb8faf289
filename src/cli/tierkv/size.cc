#include "cli/tierkv/size.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cli/tierkv/cli_common.h"
#include "core/resp_client.h"

namespace tierkv::cli {
namespace {

// Fewer sampled reads than this and a point moves by more than the curves'
// own error (about 0.03) from one run to the next.
constexpr double kTrustedReads = 10000;
constexpr int kPlotWidth = 50;
// A size error above this is worth a word: a cliff within it moves a point
// by more than the curves' error elsewhere.
constexpr double kNotedSizeError = 0.02;

// "size=…,miss_ratio=…,filled=…,size_error=…" of one point.
std::optional<CurvePoint> parse_point(double scale, std::string_view fields) {
  CurvePoint p;
  p.scale = scale;
  bool size = false, ratio = false;
  while (!fields.empty()) {
    const size_t comma = fields.find(',');
    const std::string_view field = fields.substr(0, comma);
    fields = comma == std::string_view::npos ? std::string_view{} : fields.substr(comma + 1);
    const size_t eq = field.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string name(field.substr(0, eq));
    const double value = std::strtod(std::string(field.substr(eq + 1)).c_str(), nullptr);
    if (name == "size") p.size_bytes = value, size = true;
    if (name == "miss_ratio") p.miss_ratio = value, ratio = true;
    if (name == "filled") p.filled = value != 0;
    if (name == "size_error") p.size_error = value;
  }
  if (!size || !ratio) return std::nullopt;
  return p;
}

// mrc_<tier>_<scale>x:<fields>
void parse_curve_line(std::string_view name, std::string_view value, SizingReport& r) {
  for (auto [prefix, curve] : {std::pair{std::string_view("mrc_memory_"), &r.memory},
                               std::pair{std::string_view("mrc_tiered_"), &r.tiered}}) {
    if (!name.starts_with(prefix) || !name.ends_with('x')) continue;
    const std::string scale(name.substr(prefix.size(), name.size() - prefix.size() - 1));
    if (std::optional<CurvePoint> p = parse_point(std::strtod(scale.c_str(), nullptr), value))
      curve->push_back(*p);
  }
}

std::string plot(const std::vector<CurvePoint>& curve) {
  std::string out;
  for (const CurvePoint& p : curve) {
    const int bar = static_cast<int>((1.0 - p.miss_ratio) * kPlotWidth + 0.5);
    out += fmt::format("  {:>5}x {:>11} |{:<{}}| {:.3f}  size +-{:.0f}%\n", p.scale,
                       human_bytes(p.size_bytes), std::string(std::clamp(bar, 0, kPlotWidth), '#'),
                       kPlotWidth, 1.0 - p.miss_ratio, 100 * p.size_error);
  }
  return out;
}

std::string answer(std::string_view tier, const std::vector<CurvePoint>& curve, double target) {
  if (curve.empty()) return {};
  std::optional<double> size = size_for_hit_ratio(curve, target);
  if (!size)
    return fmt::format("{}: no size up to {} reaches a hit ratio of {:.3f} (best {:.3f})\n", tier,
                       human_bytes(curve.back().size_bytes), target, 1.0 - curve.back().miss_ratio);
  return fmt::format("{}: {} reaches a hit ratio of {:.3f}\n", tier, human_bytes(*size), target);
}

}  // namespace

std::optional<SizingReport> parse_sizing(std::string_view info) {
  if (info.find("# Sizing") == std::string_view::npos) return std::nullopt;
  SizingReport r;
  while (!info.empty()) {
    const size_t eol = info.find('\n');
    std::string_view line = info.substr(0, eol);
    info = eol == std::string_view::npos ? std::string_view{} : info.substr(eol + 1);
    if (line.ends_with('\r')) line.remove_suffix(1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon), value = line.substr(colon + 1);
    const double number = std::strtod(std::string(value).c_str(), nullptr);
    if (name == "mrc_enabled") r.enabled = number != 0;
    if (name == "mrc_sample_rate") r.sample_rate = number;
    if (name == "mrc_sampled_reads") r.sampled_reads = number;
    parse_curve_line(name, value, r);
  }
  return r;
}

std::optional<double> size_for_hit_ratio(const std::vector<CurvePoint>& curve, double target) {
  for (size_t i = 0; i < curve.size(); ++i) {
    const double hit = 1.0 - curve[i].miss_ratio;
    if (hit < target) continue;
    if (i == 0) return curve[0].size_bytes;
    const double before = 1.0 - curve[i - 1].miss_ratio;
    const double t = hit > before ? (target - before) / (hit - before) : 1.0;
    return curve[i - 1].size_bytes + t * (curve[i].size_bytes - curve[i - 1].size_bytes);
  }
  return std::nullopt;
}

std::string render_sizing(const SizingReport& r, double target) {
  std::string out = fmt::format(
      "sample: {:.4f} of keys, {:.0f} sampled reads\n\nmemory alone (hit ratio by size):\n",
      r.sample_rate, r.sampled_reads);
  out += plot(r.memory);
  if (!r.tiered.empty()) out += "\nmemory and flash, both scaled (hit ratio by their sum):\n";
  out += plot(r.tiered);
  if (target > 0) {
    out += "\n";
    out += answer("memory", r.memory, target);
    out += answer("memory and flash", r.tiered, target);
  }
  out += "\n";
  if (r.sampled_reads < kTrustedReads)
    out += fmt::format("caution: only {:.0f} sampled reads; the curves settle after about {:.0f}\n",
                       r.sampled_reads, kTrustedReads);
  const std::vector<CurvePoint>& widest = r.tiered.empty() ? r.memory : r.tiered;
  if (!widest.empty() && !widest.back().filled)
    out +=
        "caution: no model of the largest size has had to evict: the keys seen so far fit, and "
        "its misses are first reads only. A working set still growing looks the same; ask again "
        "later.\n";
  double size_error = 0;
  for (const std::vector<CurvePoint>* curve : {&r.memory, &r.tiered})
    for (const CurvePoint& p : *curve) size_error = std::max(size_error, p.size_error);
  if (size_error > kNotedSizeError)
    out += fmt::format(
        "caution: each point models its size to within +-{:.0f}% (a sample of keys); where the "
        "curve falls steeply within that span (a loop just larger than the cache) a point may be "
        "off by the whole fall. A larger mrc-max-bytes narrows it.\n",
        100 * size_error);
  out +=
      "The curves predict this server's own request stream at other sizes; a change of "
      "workload, value sizes or key count moves them.\n";
  return out;
}

int run_size(const SizeArgs& a) {
  Result<RespClient> client = RespClient::connect(a.server, std::chrono::seconds(5));
  if (!client) return fail(fmt::format("{}: {}", a.server, client.status().to_string()), 2);
  if (!a.password.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!a.user.empty()) auth.push_back(a.user);
    auth.push_back(a.password);
    Result<RespValue> ok = client->command(auth);
    if (!ok || ok->type == RespValue::Type::kError)
      return fail("AUTH refused: " + (ok ? ok->text : ok.status().to_string()), 2);
  }
  Result<RespValue> info = client->command({"INFO", "sizing"});
  if (!info) return fail(info.status().to_string(), 2);
  if (info->type == RespValue::Type::kError) return fail(info->text, 2);
  std::optional<SizingReport> report = parse_sizing(info->text);
  if (!report) return fail("the server has no INFO sizing section (an older version?)", 2);
  if (!report->enabled) return fail("the server keeps no curves (mrc-sample-rate is 0)", 1);
  std::fputs(render_sizing(*report, a.target).c_str(), stdout);
  return 0;
}

}  // namespace tierkv::cli
