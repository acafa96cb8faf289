// tierkv size: the server's miss-ratio curves (INFO sizing) as a table and
// a terminal plot, and the memory and flash sizes that reach a target hit
// ratio (--target). It also says what the curves cannot know: too few
// sampled reads, or a working set still growing (no model has had to
// evict: the largest sizes then show cold misses only).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tierkv::cli {

struct SizeArgs {
  std::string server = "127.0.0.1:6380", user, password;
  double target = 0;  // a hit ratio in (0, 1); 0: none asked
};

struct CurvePoint {
  double scale = 0;
  double size_bytes = 0;
  double miss_ratio = 1;
  bool filled = false;
  double size_error = 0;  // the size it models is known to within this share
};
struct SizingReport {
  bool enabled = false;
  double sample_rate = 0;
  double sampled_reads = 0;
  std::vector<CurvePoint> memory, tiered;
};

// INFO sizing's text; nullopt if it has no `# Sizing` section.
std::optional<SizingReport> parse_sizing(std::string_view info);
// The smallest size at which the curve's hit ratio reaches `target`
// (linear between points), or nullopt if no point reaches it.
std::optional<double> size_for_hit_ratio(const std::vector<CurvePoint>& curve, double target);
// The report as text: the table, the plot, the answer and the caveats.
std::string render_sizing(const SizingReport& report, double target);

// 0: shown; 1: the server keeps no curves (mrc-sample-rate 0); 2: usage or
// connection error.
int run_size(const SizeArgs& a);

}  // namespace tierkv::cli
