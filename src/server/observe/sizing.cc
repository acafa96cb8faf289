#include "server/observe/sizing.h"

#include <fmt/format.h>

#include <string_view>
#include <vector>

namespace tierkv::server {
namespace {

void info_points(std::string_view tier, const std::vector<MissRatioCurves::Point>& points,
                 std::string& out) {
  for (const MissRatioCurves::Point& p : points)
    out += fmt::format("mrc_{}_{}x:size={},miss_ratio={:.4f},filled={},size_error={:.4f}\r\n", tier,
                       p.scale, p.size_bytes, p.miss_ratio, p.filled ? 1 : 0, p.size_error);
}

void metric_points(std::string_view tier, const std::vector<MissRatioCurves::Point>& points,
                   std::string& out) {
  for (const MissRatioCurves::Point& p : points)
    out +=
        fmt::format("tierkv_mrc_miss_ratio{{tier=\"{}\",size_bytes=\"{}\",scale=\"{}\"}} {:.6f}\n",
                    tier, p.size_bytes, p.scale, p.miss_ratio);
}

}  // namespace

void render_sizing_info(const MissRatioCurves::Curves& c, std::string& out) {
  out += "# Sizing\r\n";
  out += fmt::format("mrc_enabled:{}\r\n", c.memory.empty() ? 0 : 1);
  if (c.memory.empty()) return;
  out += fmt::format(
      "mrc_sample_rate:{:.6f}\r\nmrc_sampled_reads:{}\r\nmrc_sampled_keys:{}\r\n"
      "mrc_model_bytes:{}\r\nmrc_resamples:{}\r\n",
      c.sample_rate, c.sampled_reads, c.sampled_keys, c.model_bytes, c.resamples);
  info_points("memory", c.memory, out);
  info_points("tiered", c.tiered, out);
}

void render_sizing_metrics(const MissRatioCurves::Curves& c, std::string& out) {
  if (c.memory.empty()) return;
  out +=
      "# HELP tierkv_mrc_miss_ratio miss ratio the sampled reads would have had at this size "
      "(tier memory: memory alone; memory_flash: memory and flash, both scaled)\n"
      "# TYPE tierkv_mrc_miss_ratio gauge\n";
  metric_points("memory", c.memory, out);
  metric_points("memory_flash", c.tiered, out);
  out += fmt::format(
      "# HELP tierkv_mrc_sample_rate share of keys the curves sample now\n"
      "# TYPE tierkv_mrc_sample_rate gauge\ntierkv_mrc_sample_rate {:.6f}\n"
      "# HELP tierkv_mrc_sampled_reads_total reads of sampled keys\n"
      "# TYPE tierkv_mrc_sampled_reads_total counter\ntierkv_mrc_sampled_reads_total {}\n"
      "# HELP tierkv_mrc_model_bytes DRAM the curves' models take, about\n"
      "# TYPE tierkv_mrc_model_bytes gauge\ntierkv_mrc_model_bytes {}\n",
      c.sample_rate, c.sampled_reads, c.model_bytes);
}

}  // namespace tierkv::server
