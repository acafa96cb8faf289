// Cluster mode (cluster-enabled yes): which commands this node serves, and
// the CLUSTER family, as Redis Cluster 7 answers them.
//
//   CLUSTER KEYSLOT key | MYID | INFO | SLOTS | SHARDS | NODES
//           | COUNTKEYSINSLOT slot | GETKEYSINSLOT slot count
//   ASKING, READONLY, READWRITE
//
// The slot map comes from etcd (cluster::Member); routing decisions are
// cluster::route()'s. With cluster mode off, these answer as a Redis
// without cluster support does.
#include <fmt/format.h>

#include "cluster/handoffs.h"
#include "cluster/member.h"
#include "cluster/router.h"
#include "core/clock.h"
#include "server/cluster/slot_migrator.h"
#include "server/cluster/slot_purger.h"
#include "server/commands/command.h"
#include "server/commands/key_walk.h"
#include "server/commands/string_common.h"
#include "server/protocol/number_text.h"

namespace tierkv::server {
namespace {

constexpr std::string_view kDisabled = "ERR This instance has cluster support disabled";

// The membership, or null after replying the error for cluster mode off.
cluster::Member* member_or_error(CommandContext& ctx) {
  cluster::Member* member = ctx.server.cluster();
  if (member == nullptr) ctx.reply.error(kDisabled);
  return member;
}

// The map, or an empty one before the first arrives.
std::shared_ptr<const cluster::SlotMap> map_of(const cluster::Member& member) {
  std::shared_ptr<const cluster::SlotMap> map = member.map();
  return map ? map : std::make_shared<const cluster::SlotMap>();
}

void reply_node(CommandContext& ctx, const cluster::ClusterNode& node) {
  ctx.reply.array(3);
  ctx.reply.bulk(node.host);
  ctx.reply.integer(node.port);
  ctx.reply.bulk(node.id);
}

void cluster_slots(CommandContext& ctx, const cluster::SlotMap& map) {
  const std::vector<cluster::SlotRange> ranges = map.ranges();
  ctx.reply.array(ranges.size());
  for (const cluster::SlotRange& r : ranges) {
    ctx.reply.array(3);
    ctx.reply.integer(r.first);
    ctx.reply.integer(r.last);
    reply_node(ctx, map.nodes()[r.node]);
  }
}

void cluster_shards(CommandContext& ctx, const cluster::SlotMap& map) {
  const std::vector<cluster::SlotRange> ranges = map.ranges();
  ctx.reply.array(map.nodes().size());
  for (size_t n = 0; n < map.nodes().size(); ++n) {
    const cluster::ClusterNode& node = map.nodes()[n];
    ctx.reply.map(2);
    ctx.reply.bulk("slots");
    size_t owned = 0;
    for (const cluster::SlotRange& r : ranges) owned += r.node == n ? 1 : 0;
    ctx.reply.array(2 * owned);
    for (const cluster::SlotRange& r : ranges) {
      if (r.node != n) continue;
      ctx.reply.integer(r.first);
      ctx.reply.integer(r.last);
    }
    ctx.reply.bulk("nodes");
    ctx.reply.array(1);
    ctx.reply.map(7);
    ctx.reply.bulk("id");
    ctx.reply.bulk(node.id);
    ctx.reply.bulk("port");
    ctx.reply.integer(node.port);
    ctx.reply.bulk("ip");
    ctx.reply.bulk(node.host);
    ctx.reply.bulk("endpoint");
    ctx.reply.bulk(node.host);
    ctx.reply.bulk("role");
    ctx.reply.bulk("master");
    ctx.reply.bulk("replication-offset");
    ctx.reply.integer(0);
    ctx.reply.bulk("health");
    ctx.reply.bulk("online");
  }
}

std::string cluster_nodes_text(const cluster::SlotMap& map, std::string_view self_id) {
  const std::vector<cluster::SlotRange> ranges = map.ranges();
  std::string out;
  for (size_t n = 0; n < map.nodes().size(); ++n) {
    const cluster::ClusterNode& node = map.nodes()[n];
    out += fmt::format("{} {}:{}@{} {}master - 0 0 {} connected", node.id, node.host, node.port,
                       node.port + 10000, node.id == self_id ? "myself," : "", map.version());
    for (const cluster::SlotRange& r : ranges) {
      if (r.node != n) continue;
      out +=
          r.first == r.last ? fmt::format(" {}", r.first) : fmt::format(" {}-{}", r.first, r.last);
    }
    out += "\n";
  }
  return out;
}

std::string cluster_info_text(const cluster::Member& member, const cluster::SlotMap& map) {
  const size_t assigned = cluster::kSlotCount - map.unowned_slots();
  size_t owning = 0;
  for (size_t n = 0; n < map.nodes().size(); ++n) owning += map.slots_owned_by(n) > 0 ? 1 : 0;
  const bool ok = member.up() && assigned == cluster::kSlotCount;
  return fmt::format(
      "cluster_state:{}\r\ncluster_slots_assigned:{}\r\ncluster_slots_ok:{}\r\n"
      "cluster_slots_pfail:0\r\ncluster_slots_fail:{}\r\ncluster_known_nodes:{}\r\n"
      "cluster_size:{}\r\ncluster_current_epoch:{}\r\ncluster_my_epoch:{}\r\n",
      ok ? "ok" : "fail", assigned, member.up() ? assigned : 0, member.up() ? 0 : assigned,
      map.nodes().size(), owning, map.version(), map.version());
}

// Keys of `slot` held here, up to `limit`, by one walk of the key space:
// O(keys on this node), which bounds these commands' cost.
std::vector<std::string> keys_in_slot(Store& store, uint16_t slot, uint64_t limit) {
  std::vector<std::string> out;
  uint64_t cursor = 0;
  do {
    ScanPage page = store.scan(cursor, 1000);
    for (std::string& key : page.keys) {
      if (out.size() < limit && cluster::key_slot(key) == slot) out.push_back(std::move(key));
    }
    cursor = page.next_cursor;
  } while (cursor != 0 && out.size() < limit);
  return out;
}

// CLUSTER COUNTKEYSINSLOT slot | GETKEYSINSLOT slot count, with Redis 7's
// error texts.
void keys_in_slot_command(CommandContext& ctx, bool get) {
  const std::optional<int64_t> slot = parse_int64(ctx.arg(2));
  const std::optional<int64_t> count = get ? parse_int64(ctx.arg(3)) : std::optional<int64_t>(0);
  if (!slot || !count) return ctx.reply.error(errors::kNotInteger);
  const bool bad_slot = *slot < 0 || *slot >= cluster::kSlotCount;
  if (!get && bad_slot) return ctx.reply.error("ERR Invalid slot");
  if (get && (bad_slot || *count < 0)) return ctx.reply.error("ERR Invalid slot or number of keys");
  const auto limit = get ? static_cast<uint64_t>(*count) : UINT64_MAX;
  run_key_walk(ctx, [&store = ctx.store, slot = static_cast<uint16_t>(*slot), limit, get] {
    return [keys = keys_in_slot(store, slot, limit), get](ReplyBuffer& reply) {
      if (!get) {
        reply.integer(static_cast<int64_t>(keys.size()));
        return;
      }
      reply.array(keys.size());
      for (const std::string& k : keys) reply.bulk(k);
    };
  });
}

void cluster_command(CommandContext& ctx) {
  const std::string_view sub = ctx.arg(1);
  if (iequals(sub, "help")) {
    return help_reply(ctx, {"CLUSTER <subcommand> [<arg> ...]. Subcommands are:", "KEYSLOT <key>",
                            "MYID", "INFO", "SLOTS", "SHARDS", "NODES", "COUNTKEYSINSLOT <slot>",
                            "GETKEYSINSLOT <slot> <count>"});
  }
  if (iequals(sub, "keyslot")) {
    if (ctx.argc() != 3) return ctx.reply.error(errors::wrong_arity("cluster|keyslot"));
    if (member_or_error(ctx) == nullptr) return;  // Redis too refuses it with cluster mode off
    return ctx.reply.integer(cluster::key_slot(ctx.arg(2)));
  }
  cluster::Member* member = member_or_error(ctx);
  if (member == nullptr) return;
  if (iequals(sub, "countkeysinslot") || iequals(sub, "getkeysinslot")) {
    const bool get = iequals(sub, "getkeysinslot");
    if (ctx.argc() != (get ? 4 : 3))
      return ctx.reply.error(
          errors::wrong_arity(get ? "cluster|getkeysinslot" : "cluster|countkeysinslot"));
    return keys_in_slot_command(ctx, get);
  }
  const std::shared_ptr<const cluster::SlotMap> map = map_of(*member);
  if (ctx.argc() != 2) {
    return ctx.reply.error(fmt::format(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLUSTER HELP.", sub));
  }
  if (iequals(sub, "myid")) return ctx.reply.bulk(member->self().id);
  if (iequals(sub, "info")) return ctx.reply.verbatim(cluster_info_text(*member, *map));
  if (iequals(sub, "slots")) return cluster_slots(ctx, *map);
  if (iequals(sub, "shards")) return cluster_shards(ctx, *map);
  if (iequals(sub, "nodes")) return ctx.reply.verbatim(cluster_nodes_text(*map, member->self().id));
  ctx.reply.error(fmt::format(
      "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLUSTER HELP.", sub));
}

void asking_command(CommandContext& ctx) {
  if (member_or_error(ctx) == nullptr) return;
  ctx.client.asking = true;
  ctx.reply.ok();
}

void readonly_command(CommandContext& ctx) {
  if (member_or_error(ctx) == nullptr) return;
  ctx.client.readonly = true;
  ctx.reply.ok();
}

void readwrite_command(CommandContext& ctx) {
  if (member_or_error(ctx) == nullptr) return;
  ctx.client.readonly = false;
  ctx.reply.ok();
}

}  // namespace

const CachedMap& cached_map(const cluster::Member& member) {
  thread_local CachedMap cached;
  const uint64_t publications = cluster::Member::publications();
  if (cached.member != &member || cached.publications != publications || !cached.map) {
    cached.member = &member;
    cached.publications = publications;
    cached.map = member.map();
    cached.self = cached.map
                      ? cached.map->index_of(member.self().id).value_or(cluster::SlotMap::kNoNode)
                      : cluster::SlotMap::kNoNode;
  }
  return cached;
}

namespace {

CommandKeys keys_of(const CommandSpec& spec, std::span<const std::string_view> argv,
                    const ClientState& client) {
  if (!(spec.flags & kRunsQueue)) return command_keys(spec, argv);
  // EXEC: the keys of every queued command must share one slot.
  CommandKeys keys;
  for (const QueuedCommand& q : client.txn.queue) {
    std::vector<std::string_view> args(q.args.begin(), q.args.end());
    for (std::string_view k : command_keys(*q.spec, args)) keys.push_back(k);
  }
  return keys;
}

// Routes `keys` for a command here; "" to run it.
std::string route_keys(ServerContext& server, std::span<const std::string_view> keys, bool asking,
                       std::optional<KeyFence::Pass>& pass, bool ask_retries = true) {
  cluster::Member* member = server.cluster();
  if (member == nullptr || keys.empty()) return {};
  // Before any map, or while the lease is stale, route() answers from the
  // keys alone (CROSSSLOT, else CLUSTERDOWN): the empty map is never read.
  static const cluster::SlotMap kNoMap;
  const CachedMap& cached = cached_map(*member);
  const cluster::SlotMap* map = cached.map.get();
  const size_t self_index = cached.self;
  cluster::RouteQuery query;
  query.keys = keys;
  query.asking = asking;
  query.ask_retries = ask_retries;
  // A node its map does not name yet (it just joined, and the map that adds
  // it is on its way) redirects by that map, as Redis does, rather than
  // answering that the cluster is down.
  query.cluster_up = map != nullptr && member->current();
  // Entered before route() asks whether the keys are here: a key the
  // migrator takes away after that waits until this command is done.
  KeyFence* fence = server.key_fence();
  query.slot = cluster::common_slot(keys);  // once: the CRC is most of routing's cost
  const uint16_t slot = query.slot->value_or(0);
  if (fence != nullptr && query.slot->has_value() && map &&
      self_index != cluster::SlotMap::kNoNode && map->owner(slot) == self_index &&
      map->moving_to(slot) != cluster::SlotMap::kNoNode) {
    pass = fence->enter(keys);
    if (!pass) {
      server.cluster_refusals(cluster::Route::Kind::kTryAgain).add();
      return "TRYAGAIN The key is moving to the slot's new owner";
    }
  }
  // Asked only for a moving slot: the common path builds no callback.
  if (map && query.slot->has_value() && map->moving_to(slot) != cluster::SlotMap::kNoNode)
    query.exists = [&server](std::string_view key) { return server.store().exists(key); };
  const cluster::Handoffs* handoffs = server.handoffs();
  const int64_t now_ms = coarse_mono_ms();
  if (handoffs != nullptr && handoffs->any(now_ms))
    query.handed_to = [handoffs, now_ms](uint16_t s, const cluster::ClusterNode& owner) {
      return handoffs->handed_to(s, owner.id, now_ms);
    };
  const cluster::Route route = cluster::route(map ? *map : kNoMap, self_index, query);
  if (!route.serve()) {
    server.cluster_refusals(route.kind).add();
    return route.error();
  }
  const SlotPurger* purger = server.slot_purger();
  if (purger != nullptr && purger->purging(slot)) {
    server.cluster_refusals(cluster::Route::Kind::kTryAgain).add();
    return "TRYAGAIN Slot gained just now: its old keys are being removed";
  }
  return {};
}

// Whether the keys' slot is moving to this node. A migrator's write is
// taken only then: one from a source whose map is out of date (it was
// paused past its lease, and its slot given to this node meanwhile) would
// overwrite what clients wrote here since.
bool importing_here(ServerContext& server, std::span<const std::string_view> keys) {
  const CachedMap& cached = cached_map(*server.cluster());
  const std::optional<uint16_t> slot = cluster::common_slot(keys);
  return cached.map && slot && cached.self != cluster::SlotMap::kNoNode &&
         cached.map->moving_to(*slot) == cached.self;
}

}  // namespace

std::string cluster_refusal(ServerContext& server, const CommandSpec& spec,
                            std::span<const std::string_view> argv, ClientState& client,
                            std::optional<KeyFence::Pass>& pass) {
  if (server.cluster() == nullptr) return {};
  // ASKING holds for the one command after it.
  client.command_asked = std::exchange(client.asking, false);
  const CommandKeys keys = keys_of(spec, argv, client);
  std::string refusal = route_keys(server, keys, client.command_asked, pass);
  // The keys another node's SlotMigrator sends (its connection's name).
  if (refusal.empty() && client.command_asked && client.name == kMigratorClientName) {
    if (!importing_here(server, keys)) {
      server.cluster_refusals(cluster::Route::Kind::kTryAgain).add();
      return "TRYAGAIN The slot is not being imported here";
    }
    server.cluster_keys_migrated(true).add();
  }
  return refusal;
}

std::string cluster_reroute(ServerContext& server, const CommandSpec& spec,
                            std::span<const std::string_view> argv, ClientState& client,
                            std::optional<KeyFence::Pass>& pass) {
  if (server.cluster() == nullptr) return {};
  return route_keys(server, keys_of(spec, argv, client), client.command_asked, pass);
}

std::string cluster_write_refusal(ServerContext& server, std::string_view key,
                                  std::optional<KeyFence::Pass>& pass) {
  return route_keys(server, std::span(&key, 1), /*asking=*/true, pass, /*ask_retries=*/false);
}

void register_cluster_commands(CommandTable& table) {
  table.add({"cluster", -2, kAdmin, 0, 0, 0, cluster_command,
             "Slots, nodes and the state of the cluster (cluster mode)"});
  table.add({"asking", 1, kFast, 0, 0, 0, asking_command,
             "Lets the next command reach a slot being imported"});
  table.add({"readonly", 1, kFast, 0, 0, 0, readonly_command, "Reads from replicas (none here)"});
  table.add({"readwrite", 1, kFast, 0, 0, 0, readwrite_command, "Ends READONLY"});
}

}  // namespace tierkv::server
