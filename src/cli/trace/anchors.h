// The anchor figures of /work/shared/traces/README.md: object-count miss
// ratios that independent simulators (libCacheSim's LRU and Belady) give
// for each trace at round(f * unique) objects. They are reference values
// the replay is checked against, never used to produce a result.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace tierkv::trace {

struct Anchor {
  std::string_view trace;  // file name up to the first '.'
  uint64_t requests;
  uint64_t unique;
  double fraction;
  uint64_t capacity;
  double lru;
  double min;
  double opt;
};

inline constexpr double kAnchorTolerance = 0.001;

std::span<const Anchor> readme_anchors();
// The anchor for this trace and cache fraction, or nullptr.
const Anchor* find_anchor(std::string_view trace, double fraction);
// Position of a trace in the README's table (traces it lacks sort last).
size_t anchor_order(std::string_view trace);

}  // namespace tierkv::trace
