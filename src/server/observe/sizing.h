// The miss-ratio curves (store/sizing) as INFO's `# Sizing` section and as
// /metrics' tierkv_mrc_* series. docs/sizing.md says how to read them.
#pragma once

#include <string>

#include "store/sizing/miss_ratio_curves.h"

namespace tierkv::server {

// INFO: mrc_enabled, the sample's figures, and one field per point,
// `mrc_memory_<scale>x:size=<bytes>,miss_ratio=<r>,filled=<0|1>` (and
// mrc_tiered_ for memory and flash together).
void render_sizing_info(const MissRatioCurves::Curves& curves, std::string& out);
// Prometheus: tierkv_mrc_miss_ratio{tier="memory"|"memory_flash",
// size_bytes="…",scale="…"} and the sample's gauges.
void render_sizing_metrics(const MissRatioCurves::Curves& curves, std::string& out);

}  // namespace tierkv::server
