#include "cli/tierkv/cluster_admin.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <thread>

#include "cli/tierkv/cli_common.h"
#include "cluster/etcd_client.h"
#include "cluster/member.h"
#include "cluster/move_report.h"
#include "cluster/slot_map.h"
#include "core/resp_client.h"

namespace tierkv::cli {
namespace {

using cluster::ClusterNode;
using cluster::EtcdRange;
using cluster::SlotMap;

// What etcd says of the cluster at one moment.
struct ClusterView {
  std::optional<SlotMap> map;
  std::vector<ClusterNode> live;  // registered (their lease is current)
  std::vector<std::string> draining;
  std::string controller;
  // By the id of the node whose keys wait, with the etcd revision of the
  // word (a stalled node says it again every second).
  std::map<std::string, std::pair<cluster::MoveStall, int64_t>> stalls;
  int64_t revision = 0;  // etcd's, when read

  bool is_live(const std::string& id) const {
    return std::any_of(live.begin(), live.end(), [&](const ClusterNode& n) { return n.id == id; });
  }
  bool is_draining(const std::string& id) const {
    return std::find(draining.begin(), draining.end(), id) != draining.end();
  }
  size_t moving() const {
    size_t n = 0;
    for (uint32_t s = 0; map && s < cluster::kSlotCount; ++s)
      n += map->moving_to(static_cast<uint16_t>(s)) != SlotMap::kNoNode ? 1 : 0;
    return n;
  }
  size_t moving(size_t node, bool in) const {
    size_t n = 0;
    for (uint32_t s = 0; map && s < cluster::kSlotCount; ++s) {
      const auto slot = static_cast<uint16_t>(s);
      if (map->moving_to(slot) == SlotMap::kNoNode) continue;
      n += (in ? map->moving_to(slot) : map->owner(slot)) == node ? 1 : 0;
    }
    return n;
  }
};

int etcd_failure(const Status& st) {
  const std::string& m = st.message();
  return fail(m.starts_with("etcd") ? m : "etcd: " + m, 2);
}

std::string last_part(const std::string& key) {
  return key.substr(key.rfind('/') + 1);
}

Result<ClusterView> read_view(cluster::EtcdClient& etcd, const std::string& name) {
  const std::string prefix = cluster::cluster_prefix(name);
  ClusterView v;
  Result<EtcdRange> map = etcd.get(cluster::slot_map_key(name));
  if (!map) return map.status();
  if (!map->kvs.empty()) {
    Result<SlotMap> parsed = SlotMap::from_json(map->kvs[0].value);
    if (!parsed) return Status::corruption("the slot map in etcd: " + parsed.status().message());
    v.map = std::move(*parsed);
  }
  Result<EtcdRange> nodes = etcd.get_prefix(prefix + "nodes/");
  if (!nodes) return nodes.status();
  for (const cluster::EtcdKeyValue& kv : nodes->kvs) {
    if (Result<ClusterNode> n = cluster::node_from_json(kv.value); n) v.live.push_back(*n);
  }
  Result<EtcdRange> drains = etcd.get_prefix(prefix + "drain/");
  if (!drains) return drains.status();
  for (const cluster::EtcdKeyValue& kv : drains->kvs) v.draining.push_back(last_part(kv.key));
  Result<EtcdRange> stalls = etcd.get_prefix(prefix + "stalled/");
  if (!stalls) return stalls.status();
  for (const cluster::EtcdKeyValue& kv : stalls->kvs) {
    if (Result<cluster::MoveStall> st = cluster::MoveStall::from_json(kv.value); st)
      v.stalls[last_part(kv.key)] = {std::move(*st), kv.mod_revision};
  }
  v.revision = stalls->revision;
  Result<EtcdRange> controller = etcd.get(prefix + "controller");
  if (!controller) return controller.status();
  if (!controller->kvs.empty()) v.controller = controller->kvs[0].value;
  return v;
}

// Every node the view knows: the map's, then registered ones not in it yet.
std::vector<ClusterNode> known_nodes(const ClusterView& v) {
  std::vector<ClusterNode> out = v.map ? v.map->nodes() : std::vector<ClusterNode>{};
  for (const ClusterNode& n : v.live) {
    if (std::none_of(out.begin(), out.end(), [&](const ClusterNode& o) { return o.id == n.id; }))
      out.push_back(n);
  }
  return out;
}

Result<ClusterNode> find_node(const ClusterView& v, const std::string& which) {
  std::vector<ClusterNode> found;
  for (const ClusterNode& n : known_nodes(v)) {
    const bool by_address = which == fmt::format("{}:{}", n.host, n.port);
    const bool by_id = which.size() >= 6 && n.id.starts_with(which);
    if (by_address || by_id) found.push_back(n);
  }
  if (found.size() == 1) return found[0];
  return Status::invalid_argument(found.empty() ? "no node '" + which + "' in the cluster"
                                                : "'" + which + "' names more than one node");
}

// A node's INFO cluster text ("" if it cannot be asked): one round trip
// for all of its figures.
std::string node_info(const ClusterNode& n) {
  Result<RespClient> c =
      RespClient::connect(fmt::format("{}:{}", n.host, n.port), std::chrono::milliseconds(1000));
  if (!c) return {};
  Result<RespValue> info = c->command({"INFO", "cluster"});
  return info && info->type == RespValue::Type::kBulk ? info->text : std::string();
}

// The figure `field` of an INFO text, or "-".
std::string figure_text(const std::string& info, std::string_view field) {
  const std::string key = "\n" + std::string(field) + ":";
  const size_t at = info.find(key);
  if (at == std::string::npos) return "-";
  const char* begin = info.data() + at + key.size();
  int64_t v = 0;
  if (std::from_chars(begin, info.data() + info.size(), v).ec != std::errc()) return "-";
  return std::to_string(v);
}

// Why a move of the current map does not go on, if a node moving slots
// away has said so after etcd's revision `since`: "keys of <id> cannot move
// to <id>: <reply>".
std::optional<std::string> stalled(const ClusterView& v, int64_t since = 0) {
  if (!v.map) return std::nullopt;
  for (const auto& [id, word] : v.stalls) {
    const auto& [stall, revision] = word;
    if (revision <= since) continue;
    const std::optional<size_t> i = v.map->index_of(id);
    if (!i || v.moving(*i, false) == 0) continue;  // moves nothing now: an old word
    return fmt::format("keys of {} cannot move to {}: {}", id.substr(0, 8),
                       stall.target.substr(0, 8), stall.error);
  }
  return std::nullopt;
}

void print_status(const ClusterView& v, const std::string& name) {
  std::printf("cluster '%s': map version %llu, %zu of %u slots owned, %zu moving, controller %s\n",
              name.c_str(), static_cast<unsigned long long>(v.map ? v.map->version() : 0),
              v.map ? cluster::kSlotCount - v.map->unowned_slots() : 0, cluster::kSlotCount,
              v.moving(), v.controller.empty() ? "none" : v.controller.substr(0, 8).c_str());
  std::printf("%-10s %-22s %6s %6s %6s %6s %9s %9s  %s\n", "node", "address", "weight", "slots",
              "out", "in", "moved-out", "moved-in", "state");
  for (const ClusterNode& n : known_nodes(v)) {
    const size_t i = v.map ? v.map->index_of(n.id).value_or(SlotMap::kNoNode) : SlotMap::kNoNode;
    const bool in_map = i != SlotMap::kNoNode;
    const bool live = v.is_live(n.id);
    const char* state = !live                 ? "down"
                        : v.is_draining(n.id) ? "draining"
                        : !in_map             ? "joining"
                                              : "up";
    const std::string info = live ? node_info(n) : std::string();
    const auto figure = [&](std::string_view field) { return figure_text(info, field); };
    std::printf("%-10s %-22s %6llu %6zu %6zu %6zu %9s %9s  %s\n", n.id.substr(0, 8).c_str(),
                fmt::format("{}:{}", n.host, n.port).c_str(),
                static_cast<unsigned long long>(n.weight), in_map ? v.map->slots_owned_by(i) : 0,
                in_map ? v.moving(i, false) : 0, in_map ? v.moving(i, true) : 0,
                figure("cluster_keys_migrated_out").c_str(),
                figure("cluster_keys_migrated_in").c_str(), state);
  }
  if (std::optional<std::string> why = stalled(v)) std::printf("stalled: %s\n", why->c_str());
}

// Polls until `done(view)`, showing `progress(view)` as done-of-total.
using Progress = std::pair<double, double>;
template <typename Done, typename Measure>
int watch(cluster::EtcdClient& etcd, const ClusterArgs& a, Done done, Measure measure,
          const std::string& what) {
  ProgressLine line(a.quiet);
  const auto start = std::chrono::steady_clock::now();
  // Only a stall said while this command watches counts: one said before
  // may be fixed already (CONFIG SET masterauth, then drain again).
  int64_t since = -1;
  for (;;) {
    Result<ClusterView> v = read_view(etcd, a.name);
    if (!v) {
      line.finish();
      return etcd_failure(v.status());
    }
    if (since < 0) since = v->revision;
    const Progress p = measure(*v);
    const bool finished = done(*v);
    line.show(p.first, p.second,
              fmt::format("{} of {} slots  map version {}", static_cast<uint64_t>(p.first),
                          static_cast<uint64_t>(p.second), v->map ? v->map->version() : 0),
              finished);
    if (finished) {
      line.finish();
      std::printf("%s\n", what.c_str());
      return 0;
    }
    if (std::optional<std::string> why = stalled(*v, since)) {
      line.finish();
      return fail(*why + " (the keys stay where they are; the move goes on trying)", 1);
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (interrupted.load() || (a.timeout_s > 0 && waited >= a.timeout_s)) {
      line.finish();
      return fail(std::string(interrupted.load() ? "stopped watching" : "timed out") +
                      "; the cluster goes on (tierkv cluster status shows it)",
                  1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

cluster::EtcdClient etcd_of(const ClusterArgs& a) {
  return cluster::EtcdClient({a.etcd, std::chrono::milliseconds(2000), a.etcd_security});
}

}  // namespace

int run_cluster_status(const ClusterArgs& a) {
  cluster::EtcdClient etcd = etcd_of(a);
  Result<ClusterView> v = read_view(etcd, a.name);
  if (!v) return etcd_failure(v.status());
  if (!v->map && v->live.empty()) return fail("no cluster '" + a.name + "' in etcd", 2);
  print_status(*v, a.name);
  return 0;
}

int run_cluster_drain(const ClusterArgs& a) {
  cluster::EtcdClient etcd = etcd_of(a);
  Result<ClusterView> v = read_view(etcd, a.name);
  if (!v) return etcd_failure(v.status());
  Result<ClusterNode> node = find_node(*v, a.nodes.at(0));
  if (!node) return fail(node.status().message(), 2);
  if (v->live.size() < 2) return fail("a drain needs another live node to take the slots", 2);
  const std::string key = cluster::cluster_prefix(a.name) + "drain/" + node->id;
  if (Result<int64_t> put = etcd.put(key, ""); !put) return etcd_failure(put.status());
  if (a.no_wait) return 0;
  const std::optional<size_t> i = v->map ? v->map->index_of(node->id) : std::nullopt;
  const double owned = i ? static_cast<double>(v->map->slots_owned_by(*i)) : 0;
  auto left = [&](const ClusterView& now) -> size_t {
    const std::optional<size_t> j = now.map ? now.map->index_of(node->id) : std::nullopt;
    return j ? now.map->slots_owned_by(*j) : 0;
  };
  return watch(
      etcd, a, [&](const ClusterView& now) { return left(now) == 0 && now.moving() == 0; },
      [&](const ClusterView& now) {
        return Progress{owned - static_cast<double>(left(now)), owned};
      },
      fmt::format("drained {}: it owns no slot", node->id.substr(0, 8)));
}

int run_cluster_rebalance(const ClusterArgs& a) {
  cluster::EtcdClient etcd = etcd_of(a);
  Result<ClusterView> v = read_view(etcd, a.name);
  if (!v) return etcd_failure(v.status());
  std::vector<std::string> ids = a.nodes.empty() ? v->draining : std::vector<std::string>{};
  for (const std::string& which : a.nodes) {
    Result<ClusterNode> node = find_node(*v, which);
    if (!node) return fail(node.status().message(), 2);
    ids.push_back(node->id);
  }
  for (const std::string& id : ids) {
    if (Status st = etcd.del(cluster::cluster_prefix(a.name) + "drain/" + id); !st.is_ok())
      return etcd_failure(st);
  }
  if (a.no_wait) return 0;
  // Balanced: every live node is in the map, every slot owned, none moving.
  // Progress counts down the most slots seen moving.
  double most = 0;
  const uint64_t before = v->map ? v->map->version() : 0;
  auto balanced = [&](const ClusterView& now) {
    if (!now.map || now.map->unowned_slots() != 0 || now.moving() != 0) return false;
    if (!ids.empty() && now.map->version() == before) return false;  // not seen yet
    return std::all_of(now.live.begin(), now.live.end(),
                       [&](const ClusterNode& n) { return now.map->index_of(n.id).has_value(); });
  };
  return watch(
      etcd, a, balanced,
      [&](const ClusterView& now) {
        most = std::max(most, static_cast<double>(now.moving()));
        return Progress{most - static_cast<double>(now.moving()), most};
      },
      "balanced: every slot owned, none moving");
}

}  // namespace tierkv::cli
