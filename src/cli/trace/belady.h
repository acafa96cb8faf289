// Offline optimal replacement for unit-size objects, as the trace README
// defines it:
// * MIN (Belady): every miss is inserted; when full, the resident object
//   whose next use is farthest away is evicted.
// * OPT: like MIN, but a missed object whose next use is farther than every
//   resident's is not inserted (bypass). Never more misses than MIN.
// Compulsory misses are counted in both.
#pragma once

#include <cstdint>

#include "cli/trace/dense_trace.h"

namespace tierkv::trace {

uint64_t belady_min_misses(const DenseTrace& trace, size_t capacity);
uint64_t belady_opt_misses(const DenseTrace& trace, size_t capacity);

}  // namespace tierkv::trace
