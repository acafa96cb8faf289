// A trace relabelled with dense ids 0..unique-1, plus each request's next
// use: what the optimal policies and the replay loop index by.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tierkv::trace {

struct DenseTrace {
  std::vector<uint32_t> ids;       // dense id per request
  std::vector<uint64_t> keys;      // original id per dense id
  std::vector<uint32_t> next_use;  // next request for the same id; ids.size() if none

  size_t requests() const { return ids.size(); }
  size_t unique() const { return keys.size(); }
  // The next_use value of a request whose id is never requested again.
  uint32_t no_next_use() const { return static_cast<uint32_t>(ids.size()); }
};

DenseTrace densify(const std::vector<uint64_t>& raw_ids);

}  // namespace tierkv::trace
