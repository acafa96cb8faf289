// Controller: keeps the slot map in step with the live nodes. Every node
// runs one; one at a time leads.
//
// Election: the leader holds /tierkv/<name>/controller, a key created only
// if absent, under the leader's own lease. It leads while it renews that
// lease; if it dies or loses etcd, the key goes with the lease and another
// node's next attempt takes it.
//
// The leader, every `interval`:
// * reads the live nodes (nodes/, each under its node's lease), the map,
//   the move reports (moved/, see move_report.h), and the nodes asked to
//   drain (drain/<id>: they weigh 0, unless every node is draining);
// * writes the next version if it differs (next_map()).
// A dead node's slots go to the survivors at once, where their keys are
// misses. A live node's surplus slots (a node joined, or one drains with
// weight 0) first move: the map marks them moving to their new owner, the
// owner streams their keys over (slot_migrator.h) and reports it, and the
// next map flips them. The write is a compare-and-swap on the map's
// revision: two leaders (the old one not yet aware its lease expired) never
// interleave their maps.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd_client.h"
#include "cluster/move_report.h"
#include "cluster/slot_map.h"
#include "core/mutex.h"

namespace tierkv::cluster {

class EtcdClient;

struct ControllerOptions {
  std::vector<std::string> etcd_endpoints;
  EtcdSecurity etcd_security;  // TLS files and login (etcd_client.h)
  std::string cluster_name = "tierkv";
  std::string self_id;
  std::chrono::seconds lease_ttl{5};
  std::chrono::milliseconds interval{500};
  std::chrono::milliseconds etcd_timeout{1000};
};

// The map that `live` nodes should have, starting from `current` (null:
// none yet); `current` itself (same version) if nothing changes, else
// version max(current's + 1, `min_version`):
// * moving slots whose owner reported them moved (`reports`, by node id,
//   for current's version) flip to their target;
// * dead nodes go, and their slots are owned by the balance at once;
// * every other slot whose owner is not the one the balance wants starts
//   (or keeps) moving to it.
// Slots keep their "since" while their holders stay; a slot given to a new
// owner or target holds the new version.
SlotMap next_map(const SlotMap* current, const std::vector<ClusterNode>& live,
                 const std::map<std::string, MoveReport>& reports = {}, uint64_t min_version = 0);

class Controller {
 public:
  explicit Controller(ControllerOptions options);
  ~Controller();  // gives up the lead at once
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  bool leading() const { return leading_.load(std::memory_order_acquire); }
  uint64_t maps_written() const { return maps_written_.load(std::memory_order_relaxed); }
  uint64_t terms() const {
    return terms_.load(std::memory_order_relaxed);
  }  // times it took the lead

 private:
  void run(std::stop_token stop);
  // One round as leader (or candidate); false if the lead was lost.
  bool lead_once(EtcdClient& etcd);
  bool campaign(EtcdClient& etcd);

  const ControllerOptions options_;
  int64_t lease_ = 0;
  std::atomic<bool> leading_{false};
  std::atomic<uint64_t> maps_written_{0}, terms_{0};
  std::jthread thread_;
};

}  // namespace tierkv::cluster
