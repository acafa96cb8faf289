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

// MoveStall: why a node's keys are not moving, for the operator (tierkv
// cluster drain|rebalance exit 1 with it, status shows it). The node
// writes it when its new owner refuses a key for a reason that does not
// pass on its own (a wrong masterauth, the owner's I/O errors), or when a
// batch has failed for longer than the migrator's timeout; it deletes it
// once a batch lands again; while the stall lasts it writes it again every
// second, so a watcher can tell a stall said since it began watching. The
// keys stay on the node meanwhile, and it keeps trying.
//
// Kept in etcd at /tierkv/<name>/stalled/<node-id> (stall_key()), as JSON:
//   {"version": 7, "target": "target-id", "error": "WRONGPASS ..."}
struct MoveStall {
  uint64_t version = 0;
  std::string target;
  std::string error;

  std::string to_json() const;
  static Result<MoveStall> from_json(std::string_view text);
};

std::string stall_key(std::string_view cluster_name, std::string_view node_id);

}  // namespace tierkv::cluster
