// Runs every (trace, cache size, policy) replay plus MIN and OPT, in
// parallel, and renders the results as a table or JSON.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/trace/anchors.h"
#include "cli/trace/trace_reader.h"
#include "core/status.h"
#include "memory/policy/eviction_policy.h"

namespace tierkv::trace {

struct EvalConfig {
  std::vector<double> fractions{0.01, 0.10};
  std::vector<memory::PolicyKind> policies{std::begin(memory::kAllPolicies),
                                           std::end(memory::kAllPolicies)};
  unsigned jobs = 2;
};

struct TraceInput {
  std::string path;
  std::optional<TraceFormat> format;
};

struct PolicyFigure {
  memory::PolicyKind policy;
  uint64_t misses = 0;
  double miss_ratio = 0;
};

struct SizeResult {
  double fraction = 0;
  uint64_t capacity = 0;
  std::vector<PolicyFigure> policies;
  double min_ratio = 0;
  double opt_ratio = 0;
  const Anchor* anchor = nullptr;
  std::optional<bool> lru_ok;  // set when there is an anchor and LRU ran
  std::optional<bool> min_ok;  // set when there is an anchor
};

struct TraceResult {
  std::string name;
  std::string path;
  uint64_t requests = 0;
  uint64_t unique = 0;
  std::vector<SizeResult> sizes;
};

// The cache size in objects for a fraction of the unique ids (at least 1).
uint64_t capacity_for(double fraction, uint64_t unique);

Result<std::vector<TraceResult>> evaluate(const std::vector<TraceInput>& inputs,
                                          const EvalConfig& config);

// False if any anchored LRU or MIN figure is off by more than the tolerance.
bool anchors_hold(const std::vector<TraceResult>& results);

// A plain text table, or the same rows as a Markdown table.
std::string format_table(const std::vector<TraceResult>& results, bool markdown = false);
std::string format_json(const std::vector<TraceResult>& results);

}  // namespace tierkv::trace
