#include "cluster/controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "cluster/etcd_client.h"
#include "cluster/member.h"
#include "cluster/move_report.h"

namespace tierkv::cluster {
namespace {

std::string controller_key(std::string_view cluster_name) {
  return cluster_prefix(cluster_name) + "controller";
}

bool same_nodes(const SlotMap& map, const std::vector<ClusterNode>& live) {
  if (map.nodes().size() != live.size()) return false;
  for (const ClusterNode& n : live) {
    const std::optional<size_t> i = map.index_of(n.id);
    if (!i || !(map.nodes()[*i] == n)) return false;
  }
  return true;
}

}  // namespace

namespace {

// Whether every key of `slot` has moved from its owner to its target, by
// the owner's report for `map`'s version.
bool move_done(const SlotMap& map, uint16_t slot,
               const std::map<std::string, MoveReport>& reports) {
  const size_t owner = map.owner(slot), target = map.moving_to(slot);
  if (owner == SlotMap::kNoNode || target == SlotMap::kNoNode) return false;
  auto it = reports.find(map.nodes()[owner].id);
  return it != reports.end() && it->second.version == map.version() &&
         it->second.moved_to(slot, map.nodes()[target].id);
}

bool same_slots(const SlotMap& a, const SlotMap& b) {
  for (uint32_t s = 0; s < kSlotCount; ++s) {
    const auto slot = static_cast<uint16_t>(s);
    if (a.owner(slot) != b.owner(slot) || a.moving_to(slot) != b.moving_to(slot)) return false;
  }
  return true;
}

// Nodes asked to drain (`tierkv cluster drain`) weigh 0, so the balance
// moves every slot off them; unless every node is draining, which would
// leave the slots nowhere.
void apply_drains(std::vector<ClusterNode>& live, const EtcdRange& drains) {
  size_t draining = 0;
  for (const ClusterNode& n : live) {
    for (const EtcdKeyValue& kv : drains.kvs)
      draining += kv.key.ends_with("/" + n.id) && n.weight > 0 ? 1 : 0;
  }
  size_t weighted = 0;
  for (const ClusterNode& n : live) weighted += n.weight > 0 ? 1 : 0;
  if (draining == 0 || draining >= weighted) return;
  for (ClusterNode& n : live) {
    for (const EtcdKeyValue& kv : drains.kvs)
      if (kv.key.ends_with("/" + n.id)) n.weight = 0;
  }
}

}  // namespace

SlotMap next_map(const SlotMap* current, const std::vector<ClusterNode>& live,
                 const std::map<std::string, MoveReport>& reports, uint64_t min_version) {
  SlotMap next = current ? *current : SlotMap();
  const uint64_t version = std::max<uint64_t>(next.version() + 1, min_version);
  // Moves reported done flip first (under the version they were reported
  // for), so the balance below starts from the new owners, who have held
  // the slots since their moves began.
  if (current) {
    for (uint32_t s = 0; s < kSlotCount; ++s) {
      const auto slot = static_cast<uint16_t>(s);
      if (move_done(*current, slot, reports))
        next.set_owner(slot, current->moving_to(slot), current->moving_since(slot));
    }
  }
  for (const ClusterNode& old : std::vector<ClusterNode>(next.nodes())) {
    const bool alive =
        std::any_of(live.begin(), live.end(), [&](const ClusterNode& n) { return n.id == old.id; });
    if (!alive) next.remove_node(old.id);
  }
  for (const ClusterNode& n : live) next.upsert_node(n);
  const std::vector<size_t> wanted = balanced_owners(next);
  for (uint32_t s = 0; s < kSlotCount; ++s) {
    const auto slot = static_cast<uint16_t>(s);
    const size_t owner = next.owner(slot);
    if (owner == wanted[s]) {
      next.set_owner(slot, owner, next.owner_since(slot));  // stays; a move stops
    } else if (owner == SlotMap::kNoNode) {
      next.set_owner(slot, wanted[s], version);  // an orphan has no keys to move
    } else if (next.moving_to(slot) != wanted[s]) {
      next.set_moving(slot, wanted[s], version);  // its owner streams its keys over first
    }
  }
  if (current && same_slots(*current, next) && same_nodes(*current, live)) return *current;
  next.set_version(version);
  return next;
}

Controller::Controller(ControllerOptions options)
    : options_(std::move(options)), thread_([this](std::stop_token stop) { run(stop); }) {}

Controller::~Controller() {
  thread_.request_stop();  // ends its sleep
  thread_.join();
  if (lease_ != 0) {
    EtcdClient etcd({options_.etcd_endpoints, options_.etcd_timeout, options_.etcd_security});
    (void)etcd.revoke(lease_);  // the next leader need not wait for the TTL
  }
}

void Controller::run(std::stop_token stop) {
  EtcdClient etcd({options_.etcd_endpoints, options_.etcd_timeout, options_.etcd_security});
  while (!stop.stop_requested()) {
    const bool was = leading_.load();
    const bool now = campaign(etcd) && lead_once(etcd);
    leading_.store(now, std::memory_order_release);
    if (now && !was) {
      terms_.fetch_add(1, std::memory_order_relaxed);
      spdlog::info("cluster: {} leads the controller", options_.self_id);
    }
    sleep_unless_stopped(stop, options_.interval);
  }
}

// Holds the controller key, or takes it if it is free; renews the lease.
bool Controller::campaign(EtcdClient& etcd) {
  if (lease_ != 0) {
    if (etcd.keep_alive(lease_).is_ok()) {
      Result<EtcdRange> holder = etcd.get(controller_key(options_.cluster_name));
      if (holder.is_ok() && !holder->kvs.empty() && holder->kvs[0].value == options_.self_id)
        return true;
    }
    lease_ = 0;  // lost: expired, or etcd unreachable (campaign again later)
  }
  Result<int64_t> lease = etcd.grant_lease(options_.lease_ttl.count());
  if (!lease.is_ok()) return false;
  Result<bool> won =
      etcd.put_if(controller_key(options_.cluster_name), options_.self_id, 0, *lease);
  if (won.is_ok() && *won) {
    lease_ = *lease;
    return true;
  }
  (void)etcd.revoke(*lease);
  return false;
}

bool Controller::lead_once(EtcdClient& etcd) {
  const std::string prefix = cluster_prefix(options_.cluster_name) + "nodes/";
  Result<EtcdRange> nodes = etcd.get_prefix(prefix);
  Result<EtcdRange> stored = etcd.get(slot_map_key(options_.cluster_name));
  Result<EtcdRange> moved = etcd.get_prefix(cluster_prefix(options_.cluster_name) + "moved/");
  if (!nodes.is_ok() || !stored.is_ok() || !moved.is_ok()) return true;  // next round
  std::map<std::string, MoveReport> reports;
  for (const EtcdKeyValue& kv : moved->kvs) {
    Result<MoveReport> r = MoveReport::from_json(kv.value);
    if (r.is_ok()) reports[kv.key.substr(kv.key.rfind('/') + 1)] = std::move(*r);
  }
  std::vector<ClusterNode> live;
  for (const EtcdKeyValue& kv : nodes->kvs) {
    Result<ClusterNode> node = node_from_json(kv.value);
    if (node.is_ok()) live.push_back(std::move(*node));
  }
  std::sort(live.begin(), live.end(),
            [](const ClusterNode& a, const ClusterNode& b) { return a.id < b.id; });
  if (live.empty()) return true;
  Result<EtcdRange> drains = etcd.get_prefix(cluster_prefix(options_.cluster_name) + "drain/");
  if (!drains.is_ok()) return true;
  apply_drains(live, *drains);
  std::optional<SlotMap> current;
  int64_t revision = 0;  // 0: no map yet
  if (!stored->kvs.empty()) {
    Result<SlotMap> parsed = SlotMap::from_json(stored->kvs[0].value);
    revision = stored->kvs[0].mod_revision;
    if (parsed.is_ok()) current = std::move(*parsed);
  }
  // Above etcd's revision too, which only grows: every map ever written
  // had a version at most the revision it was written at, so a map that
  // was deleted, or did not parse, is still outnumbered, and nodes that
  // served it take the new one.
  SlotMap next = next_map(current ? &*current : nullptr, live, reports,
                          static_cast<uint64_t>(stored->revision) + 1);
  if (current && next.version() == current->version()) return true;
  Result<bool> written = etcd.put_if(slot_map_key(options_.cluster_name), next.to_json(), revision);
  if (written.is_ok() && *written) {
    maps_written_.fetch_add(1, std::memory_order_relaxed);
    spdlog::info("cluster: slot map version {} for {} nodes", next.version(), live.size());
  }
  return true;
}

}  // namespace tierkv::cluster
