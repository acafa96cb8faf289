// Router: whether this node serves a command's keys, and if not, what to
// answer, as Redis Cluster 7 decides it (cluster.c, getNodeByQuery):
//
// * keys in more than one slot: -CROSSSLOT;
// * the cluster is down (no map, or etcd out of reach for longer than the
//   lease): -CLUSTERDOWN, whatever the keys;
// * a slot nobody owns: -CLUSTERDOWN Hash slot not served;
// * a slot another node owns: -MOVED slot host:port, unless the slot is
//   moving here and the client said ASKING (then it is served here), or
//   this node handed it to that owner just now (handoffs.h): -ASK then;
// * ASKING for a slot that is not moving here by this node's map: -TRYAGAIN,
//   where Redis answers -MOVED. Nodes adopt each map through their own
//   watch, so the source may ask clients here before this node has the map
//   that starts the move: -MOVED back to the source would bounce a client
//   between the two with no pause until its redirection limit. -TRYAGAIN
//   makes it wait and start again at the slot's owner, which settles once
//   this node's map catches up (or answers -CLUSTERDOWN past its lease);
// * a slot this node owns that is moving away: served here while every key
//   is still here; a missing key is answered -ASK slot host:port (the new
//   owner may have it), or -TRYAGAIN for a multi-key command whose keys are
//   split between the two nodes;
// * a slot moving here, with ASKING: a multi-key command that misses some
//   of its keys gets -TRYAGAIN.
//
// A command without keys is always served here.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "cluster/slot_map.h"

namespace tierkv::cluster {

struct Route {
  enum class Kind : uint8_t { kServe, kMoved, kAsk, kCrossSlot, kDown, kUnserved, kTryAgain };
  Kind kind = Kind::kServe;
  uint16_t slot = 0;
  std::string address;  // host:port, for kMoved and kAsk
  // For kTryAgain: why, after "TRYAGAIN " (Redis's multi-key text if null).
  const char* reason = nullptr;

  bool serve() const { return kind == Kind::kServe; }
  // The error line (without '-' and CRLF) for anything but kServe.
  std::string error() const;
};

struct RouteQuery {
  std::span<const std::string_view> keys;
  // common_slot(keys), if the caller has it already (route() computes it
  // otherwise).
  std::optional<std::optional<uint16_t>> slot;
  bool asking = false;  // the client sent ASKING just before
  // Whether a slot that is not moving here, asked with ASKING, gets
  // -TRYAGAIN (a client that followed another node's -ASK) or the answer it
  // would get without ASKING (a write made here outside any command).
  bool ask_retries = true;
  bool cluster_up = true;
  // Whether a key is held here (memory or flash); asked only for a slot
  // that is moving.
  std::function<bool(std::string_view)> exists;
  // Whether this node has just handed `slot` to `owner` (handoffs.h); asked
  // only for a slot another node owns. Null: it has not.
  std::function<bool(uint16_t slot, const ClusterNode& owner)> handed_to;
};

// `self`: this node's index in `map`, or kNoNode if the map does not have
// it yet (a node that just joined): it serves nothing, and redirects.
Route route(const SlotMap& map, size_t self, const RouteQuery& query);

// The slot all of `keys` share; nullopt if they span slots (or are none).
std::optional<uint16_t> common_slot(std::span<const std::string_view> keys);

}  // namespace tierkv::cluster
