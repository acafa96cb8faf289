// ClusterNode: this server's part in a cluster (cluster::ClusterNode is how
// the slot map names a node). Its membership in etcd
// (cluster::Member, with its lease), the controller it may run, and the
// parts that act on each new slot map: the SlotPurger (old keys of gained
// slots go), the SlotMigrator (keys of slots leaving move, fenced by the
// KeyFence), the Handoffs (slots just handed on are -ASK there, not
// -MOVED), and PrefetchHints.
//
// Made (and so started) by the Server once its ports are known; destroyed
// once no connection is left to route, which leaves the cluster: the
// controller stops, the lease is revoked, then the migrator's moves end.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "cluster/controller.h"
#include "cluster/handoffs.h"
#include "cluster/member.h"
#include "core/config.h"
#include "core/metrics.h"
#include "server/cluster/key_fence.h"
#include "server/cluster/prefetch_hints.h"
#include "server/cluster/slot_migrator.h"
#include "server/cluster/slot_purger.h"
#include "store/store.h"

namespace tierkv::server {

class ClusterNode {
 public:
  // `announced_port`: the port this node serves clients on (the TLS port
  // with tls-cluster), unless cluster-announce-port says otherwise.
  // `peer_login`: how this node logs in on the others, asked at each use
  // (CONFIG SET masterauth applies to the next move).
  ClusterNode(const Config& config, uint16_t announced_port, Store& store, MetricsRegistry& metrics,
              Counter& keys_migrated_out, std::function<MigratorCredentials()> peer_login);
  ~ClusterNode();
  ClusterNode(const ClusterNode&) = delete;
  ClusterNode& operator=(const ClusterNode&) = delete;

  cluster::Member& member() { return *member_; }
  const SlotPurger& purger() const { return *purger_; }
  const cluster::Controller* controller() const { return controller_.get(); }  // null: none here
  KeyFence& fence() { return *fence_; }
  const cluster::Handoffs& handoffs() const { return *handoffs_; }
  const SlotMigrator& migrator() const { return *migrator_; }
  PrefetchHints* hints() { return hints_.get(); }  // null: cluster-prefetch-hints off

 private:
  // Member calls the purger and the migrator: they are made before it and
  // go after it.
  std::unique_ptr<SlotPurger> purger_;
  std::shared_ptr<KeyFence> fence_;  // connections' passes share it
  std::unique_ptr<cluster::Handoffs> handoffs_;
  std::unique_ptr<PrefetchHints> hints_;
  std::unique_ptr<SlotMigrator> migrator_;
  std::unique_ptr<cluster::Member> member_;
  std::unique_ptr<cluster::Controller> controller_;
};

}  // namespace tierkv::server
