// Member: this node's place in a cluster whose truth is in etcd.
//
// Keys, under /tierkv/<cluster-name>/:
//   nodes/<id>  this node's ClusterNode (JSON), attached to its lease: it
//               vanishes when the node stops renewing (dies, or loses etcd);
//   slotmap     the SlotMap (JSON), written by the controller.
//
// A keeper thread renews the lease every third of its TTL. If the lease was
// lost (etcd expired it while this node could not reach it), it takes a new
// one and registers again. A watcher thread follows the slot map and keeps
// the newest version it has seen; it never goes back to an older one.
//
// up() is false, and the server answers -CLUSTERDOWN:
// * before the first map arrives;
// * while the last renewal etcd acknowledged was sent longer than the lease
//   TTL ago (the controller may have given this node's slots away);
// * while the last read of the map that succeeded was sent longer than the
//   lease TTL ago (a watch on a connection that drops traffic silently
//   would otherwise leave the node on an old map for good); the watcher
//   reads it again every half TTL;
// * after a registration (the first, or after a lost lease), until a read
//   of the map that began after it succeeded (the map may have moved on
//   meanwhile). The keeper reads the map itself right after registering,
//   so a node that joins serves once that read is back, not after the
//   watcher's round.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd_client.h"
#include "cluster/slot_map.h"
#include "core/mutex.h"

namespace tierkv::cluster {

struct MemberOptions {
  std::vector<std::string> etcd_endpoints;
  EtcdSecurity etcd_security;  // TLS files and login (etcd_client.h)
  std::string cluster_name = "tierkv";
  ClusterNode self;
  std::chrono::seconds lease_ttl{5};
  std::chrono::milliseconds etcd_timeout{1000};
  // Runs with each newer map before it is served (`old`: the map served
  // until now, null for the first). Must not call back into the Member.
  std::function<void(const SlotMap* old, const SlotMap& next)> before_publish;
};

// The etcd keys of a cluster.
std::string cluster_prefix(std::string_view cluster_name);
std::string node_key(std::string_view cluster_name, std::string_view node_id);
std::string slot_map_key(std::string_view cluster_name);
std::string node_to_json(const ClusterNode& node);
// A node's id: 40 hex digits, as Redis's, derived from the cluster name and
// the announced address, so a node that restarts keeps its id.
std::string node_id_for(std::string_view cluster_name, std::string_view host, uint16_t port);
Result<ClusterNode> node_from_json(std::string_view text);

class Member {
 public:
  explicit Member(MemberOptions options);
  // Revokes the lease if this node holds no slot: it leaves at once. One
  // that holds slots keeps them until the lease expires, so that a restart
  // (a rolling upgrade) finds them still its own.
  ~Member();
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  // The newest slot map seen; null before the first.
  std::shared_ptr<const SlotMap> map() const;
  // Maps published by every Member of this process so far: a caller that
  // caches a map per thread asks map() again only when this has moved.
  static uint64_t publications() { return published_.load(std::memory_order_acquire); }
  bool up() const;
  // The lease and the map are current (up() without the map's lock, for a
  // caller that holds the map already).
  bool current() const;
  const ClusterNode& self() const { return options_.self; }

  struct Stats {
    uint64_t renewals = 0;       // keep-alives etcd acknowledged
    uint64_t registrations = 0;  // leases taken (1 unless one was lost)
    uint64_t maps_seen = 0;      // newer map versions taken
    uint64_t etcd_round_trips = 0, etcd_failures = 0;
  };
  Stats stats() const;

 private:
  bool holds_slots() const;
  void keep(std::stop_token stop);
  void watch(std::stop_token stop);
  // Takes `text` as the map if it parses and is newer than the one held.
  void offer_map(std::string_view text);
  // Reads the map, offers it, and marks it confirmed as of the read's
  // start; the read's answer (its revision starts a watch).
  Result<EtcdRange> read_map(EtcdClient& client);
  // Sleeps `d` or until stop is requested; false if it was.
  bool pause(std::stop_token& stop, std::chrono::milliseconds d);

  const MemberOptions options_;
  mutable Mutex mu_;
  std::shared_ptr<const SlotMap> map_ ABSL_GUARDED_BY(mu_);
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  // Steady clock, when the requests were sent: the last renewal etcd
  // acknowledged, the registration of the current lease, the last read
  // of the map that succeeded.
  std::atomic<int64_t> renewed_at_ms_{0};
  std::atomic<int64_t> registered_at_ms_{0};
  std::atomic<int64_t> map_confirmed_at_ms_{0};
  std::stop_source watch_round_ ABSL_GUARDED_BY(mu_);  // the watcher's current round
  std::atomic<uint64_t> renewals_{0}, registrations_{0}, maps_seen_{0};
  std::atomic<uint64_t> round_trips_{0}, failures_{0};
  static inline std::atomic<uint64_t> published_{0};
  std::jthread keeper_;
  std::jthread watcher_;
};

}  // namespace tierkv::cluster
