#include "cli/trace/dense_trace.h"

#include <absl/container/flat_hash_map.h>

namespace tierkv::trace {

DenseTrace densify(const std::vector<uint64_t>& raw_ids) {
  DenseTrace t;
  t.ids.reserve(raw_ids.size());
  absl::flat_hash_map<uint64_t, uint32_t> dense_of;
  for (uint64_t raw : raw_ids) {
    auto [it, inserted] = dense_of.try_emplace(raw, static_cast<uint32_t>(t.keys.size()));
    if (inserted) t.keys.push_back(raw);
    t.ids.push_back(it->second);
  }
  // One backward pass: the last position seen for an id is its next use.
  const uint32_t none = t.no_next_use();
  std::vector<uint32_t> seen(t.keys.size(), none);
  t.next_use.resize(t.ids.size());
  for (size_t i = t.ids.size(); i-- > 0;) {
    t.next_use[i] = seen[t.ids[i]];
    seen[t.ids[i]] = static_cast<uint32_t>(i);
  }
  return t;
}

}  // namespace tierkv::trace
