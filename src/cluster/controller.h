// Controller: keeps the slot map in step with the live nodes. Every node
// runs one; one at a time leads.
//
// Election: the leader holds /tierkv/<name>/controller, a key created only
// if absent, under the leader's own lease. It leads while it renews that
// lease; if it dies or loses etcd, the key goes with the lease and another
// node's next attempt takes it.
//
// The leader, every `interval`:
// * reads the live nodes (nodes/, each under its node's lease) and the map;
// * if the map's nodes or weights differ from the live ones, writes the
//   next version: live nodes in, dead ones out, every slot owned, shares
//   by weight (balanced_owners(): only surplus slots move).
// A dead node's slots go to the survivors, where their keys are misses.
// Until slot migration exists, so do the slots a joining node takes. The
// write is a compare-and-swap on the map's revision: two leaders (the old
// one not yet aware its lease expired) never interleave their maps.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/slot_map.h"

namespace tierkv::cluster {

class EtcdClient;

struct ControllerOptions {
  std::vector<std::string> etcd_endpoints;
  std::string cluster_name = "tierkv";
  std::string self_id;
  std::chrono::seconds lease_ttl{5};
  std::chrono::milliseconds interval{500};
  std::chrono::milliseconds etcd_timeout{1000};
};

// The map that `live` nodes should have, starting from `current` (null:
// none yet); `current` itself (same version) if nothing changes.
SlotMap next_map(const SlotMap* current, const std::vector<ClusterNode>& live);

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
  std::mutex mu_;
  std::condition_variable_any wake_;
  std::jthread thread_;
};

}  // namespace tierkv::cluster
