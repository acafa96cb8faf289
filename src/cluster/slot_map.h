// SlotMap: which node owns each of the 16384 hash slots, and which slots
// are moving. One versioned value, kept in etcd: the controller writes a new
// version, every node serves the newest it has seen.
//
// Invariants (from_json() refuses a map that breaks one):
// * node ids are unique, non-empty, and at most 40 bytes of [0-9a-z];
// * every slot has at most one owner, a node of the map;
// * a moving slot is owned by its source, and its target is another node.
//
// Each slot also says since which map version its owner has held it, and
// since which its target has imported it (0: not known, as in a map written
// by hand). A node held a slot without a break since version `v` exactly
// when held_since() <= v, even across maps it never saw: that is how a node
// tells, after a restart or a lost lease, whether the keys it kept of a
// slot can be stale (slot_purger.h). A slot keeps its owner's "since" while
// it moves, and a flip hands the target's "since" to the new owner.
//
// The JSON form, which etcd holds and `tierkv cluster` prints:
//   {"version": 7,
//    "nodes": [{"id": "n1", "host": "127.0.0.1", "port": 7001, "weight": 1}],
//    "slots": [[0, 5460, "n1", 3], ...],         // inclusive ranges, since
//    "moving": [{"slot": 5, "to": "n2", "since": 7}]}
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/key_slot.h"
#include "core/status.h"

namespace tierkv::cluster {

struct ClusterNode {
  std::string id;
  std::string host;
  uint16_t port = 0;
  // Share of the slots the balancer gives it, relative to the others'
  // (cluster-weight: 1 by default, or the flash size).
  uint64_t weight = 1;
  bool operator==(const ClusterNode&) const = default;
};

// Slots [first, last] owned by nodes()[node].
struct SlotRange {
  uint16_t first = 0;
  uint16_t last = 0;
  size_t node = 0;
  bool operator==(const SlotRange&) const = default;
};

class SlotMap {
 public:
  static constexpr size_t kNoNode = static_cast<size_t>(-1);

  SlotMap() : owners_(kSlotCount, kNoNode), moving_to_(kSlotCount, kNoNode) {}

  uint64_t version() const { return version_; }
  void set_version(uint64_t v) { version_ = v; }

  const std::vector<ClusterNode>& nodes() const { return nodes_; }
  // Adds a node (or updates its address and weight); returns its index.
  size_t upsert_node(const ClusterNode& node);
  // Removes a node; its slots become unowned, and moves to or from it stop.
  void remove_node(std::string_view id);
  std::optional<size_t> index_of(std::string_view id) const;

  // Index of the slot's owner in nodes(), or kNoNode.
  size_t owner(uint16_t slot) const { return owners_[slot]; }
  // Ends a move of the slot, if any.
  void set_owner(uint16_t slot, size_t node, uint64_t since = 0);
  // Slot `slot` is moving from its owner to nodes()[node]; kNoNode: not moving.
  size_t moving_to(uint16_t slot) const { return moving_to_[slot]; }
  void set_moving(uint16_t slot, size_t node, uint64_t since = 0);
  uint64_t owner_since(uint16_t slot) const { return owner_since_[slot]; }
  uint64_t moving_since(uint16_t slot) const { return moving_since_[slot]; }
  // Since when nodes()[node] has held `slot` (owned or imported it); null
  // if it does not hold it.
  std::optional<uint64_t> held_since(uint16_t slot, size_t node) const;
  size_t slots_owned_by(size_t node) const;
  size_t unowned_slots() const;
  // Contiguous runs of one owner, in slot order (unowned slots are left out).
  std::vector<SlotRange> ranges() const;

  std::string to_json() const;
  static Result<SlotMap> from_json(std::string_view text);

 private:
  uint64_t version_ = 0;
  std::vector<ClusterNode> nodes_;
  std::vector<size_t> owners_;     // by slot
  std::vector<size_t> moving_to_;  // by slot
  std::vector<uint64_t> owner_since_ = std::vector<uint64_t>(kSlotCount, 0);
  std::vector<uint64_t> moving_since_ = std::vector<uint64_t>(kSlotCount, 0);
};

// The owner each slot should have so that `map`'s nodes hold slots in
// proportion to their weights (largest remainder), moving as few slots as
// can be: a node keeps what it owns up to its share, and only its surplus
// moves. Returns one owner per slot (indexes into map.nodes()); every slot
// has one if the map has a node with a weight.
std::vector<size_t> balanced_owners(const SlotMap& map);

}  // namespace tierkv::cluster
