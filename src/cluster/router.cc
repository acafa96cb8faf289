#include "cluster/router.h"

#include <fmt/format.h>

namespace tierkv::cluster {
namespace {

std::string address_of(const ClusterNode& node) {
  return fmt::format("{}:{}", node.host, node.port);
}

Route redirect(Route::Kind kind, uint16_t slot, const ClusterNode& node) {
  return Route{kind, slot, address_of(node)};
}

Route refuse(Route::Kind kind, uint16_t slot = 0) {
  return Route{kind, slot, {}};
}

}  // namespace

std::string Route::error() const {
  switch (kind) {
    case Kind::kServe:
      return {};
    case Kind::kMoved:
      return fmt::format("MOVED {} {}", slot, address);
    case Kind::kAsk:
      return fmt::format("ASK {} {}", slot, address);
    case Kind::kCrossSlot:
      return "CROSSSLOT Keys in request don't hash to the same slot";
    case Kind::kDown:
      return "CLUSTERDOWN The cluster is down";
    case Kind::kUnserved:
      return "CLUSTERDOWN Hash slot not served";
    case Kind::kTryAgain:
      return fmt::format("TRYAGAIN {}",
                         reason ? reason : "Multiple keys request during rehashing of slot");
  }
  return {};
}

std::optional<uint16_t> common_slot(std::span<const std::string_view> keys) {
  if (keys.empty()) return std::nullopt;
  const uint16_t slot = key_slot(keys[0]);
  for (std::string_view key : keys.subspan(1))
    if (key_slot(key) != slot) return std::nullopt;
  return slot;
}

Route route(const SlotMap& map, size_t self, const RouteQuery& query) {
  if (query.keys.empty()) return {};
  const std::optional<uint16_t> slot = query.slot ? *query.slot : common_slot(query.keys);
  if (!slot) return refuse(Route::Kind::kCrossSlot);
  if (!query.cluster_up) return refuse(Route::Kind::kDown, *slot);
  const size_t owner = map.owner(*slot);
  if (owner == SlotMap::kNoNode) return refuse(Route::Kind::kUnserved, *slot);
  const size_t moving_to = map.moving_to(*slot);
  const bool moving_here = self != SlotMap::kNoNode && moving_to == self && query.asking;
  if (owner != self && !moving_here) {
    if (query.asking && query.ask_retries) {
      Route wait = refuse(Route::Kind::kTryAgain, *slot);
      wait.reason = "The slot is not being imported here yet";
      return wait;
    }
    const ClusterNode& node = map.nodes()[owner];
    // The new owner's map may still name this node: -MOVED would come back.
    const bool handed = self != SlotMap::kNoNode && query.handed_to && query.handed_to(*slot, node);
    return redirect(handed ? Route::Kind::kAsk : Route::Kind::kMoved, *slot, node);
  }
  if (moving_to == SlotMap::kNoNode) return {};
  size_t missing = 0;
  for (std::string_view key : query.keys)
    if (!query.exists || !query.exists(key)) ++missing;
  if (missing == 0) return {};
  const bool multi_key = query.keys.size() > 1;
  if (moving_here) return multi_key ? refuse(Route::Kind::kTryAgain, *slot) : Route{};
  // Moving away: what is missing here may be there already.
  if (multi_key && missing < query.keys.size()) return refuse(Route::Kind::kTryAgain, *slot);
  return redirect(Route::Kind::kAsk, *slot, map.nodes()[moving_to]);
}

}  // namespace tierkv::cluster
