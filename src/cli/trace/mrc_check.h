// The server's online miss-ratio curve (store/sizing, MissRatioCurves, at
// its default sampling) against the exact one, on a trace: the curve is fed
// what a server whose memory holds `base_fraction` of the trace's objects
// sees (a look-aside replay through the real MemoryTier: hits with the
// object's charge, misses followed by the fill), and each of its points is
// compared with a replay through the real tier at that size.
//
// A point off by more than the tolerance is also compared with the exact
// curve over the span of sizes it may really model (its size_error): a
// sample cannot place a cliff narrower than that span, and the check says
// whether the point lies within what the exact curve does there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/trace/dense_trace.h"
#include "core/status.h"
#include "memory/policy/eviction_policy.h"

namespace tierkv::trace {

struct MrcOptions {
  double base_fraction = 0.1;    // the "configured" memory, of the unique objects
  double sample_rate = 1.0;      // mrc-sample-rate
  uint64_t max_bytes = 1 << 20;  // mrc-max-bytes
  memory::PolicyKind policy = memory::PolicyKind::kS3Fifo;
  double tolerance = 0.03;  // points off by more get the span check
};

struct MrcPoint {
  double scale = 0;
  uint64_t capacity = 0;  // objects
  double online = 0;
  double exact = 0;
  double size_error = 0;  // of the online point, a share of its size
  // The exact curve's lowest and highest miss ratio over capacity x (1 +-
  // size_error), this size included; only for a point off by more than
  // the tolerance (otherwise both are `exact`).
  double exact_low = 0;
  double exact_high = 0;
  double error() const;
  // How far the online point lies outside [exact_low, exact_high]: for a
  // point within the tolerance, whose span is not replayed, its error.
  double error_beyond_span() const;
};
struct MrcCheck {
  std::vector<MrcPoint> points;
  double final_rate = 0;
  double max_error() const;
  double max_error_beyond_span() const;
};

Result<MrcCheck> check_mrc(const DenseTrace& trace, const MrcOptions& options);
// One trace's check as table rows (scale, objects, online, exact, error,
// and for a point off by more than the tolerance, the span check).
std::string format_mrc(const std::string& trace_name, const MrcCheck& check);

}  // namespace tierkv::trace
