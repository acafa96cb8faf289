// MoveReport: what a node that gives slots away tells the controller: "under
// map `version`, every key of these slots has moved to these targets". The
// controller flips a moving slot's owner to its target only on a report for
// the map it is looking at, so a report for an older move never flips a
// newer one.
//
// Kept in etcd at /tierkv/<name>/moved/<node-id> (moved_key()), as JSON:
//   {"version": 7, "moved": [[first_slot, last_slot, "target-id"], ...]}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tierkv::cluster {

struct MovedSlots {
  uint16_t first = 0;
  uint16_t last = 0;  // inclusive
  std::string target;
  bool operator==(const MovedSlots&) const = default;
};

struct MoveReport {
  uint64_t version = 0;
  std::vector<MovedSlots> moved;

  // Whether `slot` is reported moved to `target`.
  bool moved_to(uint16_t slot, std::string_view target) const;
  // Adds one slot, merging it into the last range when it extends it.
  void add(uint16_t slot, std::string_view target);

  std::string to_json() const;
  static Result<MoveReport> from_json(std::string_view text);
};

std::string moved_key(std::string_view cluster_name, std::string_view node_id);

}  // namespace tierkv::cluster
