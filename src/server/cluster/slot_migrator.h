// SlotMigrator: moves the keys of the slots this node gives away to their
// new owners while clients follow -ASK, then reports the move (MoveReport,
// in etcd) so the controller flips the map.
//
// Whenever the map has slots moving away from this node, a pass scans the
// key space once (Store::scan) and moves every key of those slots, batch by
// batch:
// * the batch is fenced (KeyFence): commands on its keys get -TRYAGAIN,
//   and the ones already running finish first;
// * each key goes to its target as ASKING + SET key value [PXAT ms],
//   pipelined; a value larger than `batch_bytes` streams alone, piece by
//   piece from memory or flash, so a value larger than memory moves too;
// * the link logs in as masterauth (and masteruser) says, or as
//   requirepass when masterauth is empty;
// * a key the target acknowledged is removed here (if still the version
//   sent), and its tombstone is on the device before the fence lifts, so
//   a restart of this node never serves it again nor sends it over a
//   newer value; one the target refuses for good (larger than its limits)
//   is dropped here too: a miss, as a cache allows;
// * any other refusal (NOAUTH, WRONGPASS, IOERR, ...) leaves the key here,
//   and the batch goes again after a pause; one that needs the operator,
//   or a failure that lasts longer than `io_timeout`, is published as a
//   MoveStall (tierkv cluster drain exits 1 with it);
// * if the connection fails, the target drops the value it was receiving
//   (never committed: no value is half-moved) and the batch is sent again,
//   still fenced, until it lands or the map stops moving its slots.
// No key of a moving slot is created here meanwhile (the router sends a
// missing key to the target), so after one full pass the slots are empty
// here, and the report says so for that map version. A newer map that
// moves the same slots to the same targets, with no map between them that
// moved others, is reported at once; any other starts a new pass (a slot
// that moves away, comes back and moves away again has keys again).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/move_report.h"
#include "cluster/slot_map.h"
#include "core/metrics.h"
#include "core/resp_client.h"
#include "core/status_wait.h"
#include "server/cluster/key_fence.h"
#include "store/store.h"

namespace tierkv::server {

// The CLIENT SETNAME of a migrator's connection: its keys count as
// migrated in on the receiving node.
inline constexpr std::string_view kMigratorClientName = "tierkv-slot-migrator";

struct MigratorCredentials {
  std::string user;      // empty: AUTH password alone (the default user)
  std::string password;  // empty: no AUTH
};

struct SlotMigratorOptions {
  std::vector<std::string> etcd_endpoints;
  std::string cluster_name;
  std::string self_id;
  size_t batch_keys = 64;
  uint64_t batch_bytes = 4 << 20;  // values up to this are pipelined whole
  uint64_t piece_bytes = 1 << 20;  // a larger one streams in pieces of this
  std::chrono::milliseconds io_timeout{10000};
  std::chrono::milliseconds fence_timeout{2000};
  std::chrono::milliseconds etcd_timeout{1000};
  // Asked at each new connection, so CONFIG SET masterauth takes effect.
  std::function<MigratorCredentials()> credentials;
};

class SlotMigrator {
 public:
  // `keys_out` counts the keys the targets took.
  SlotMigrator(Store& store, KeyFence& fence, Counter& keys_out, SlotMigratorOptions options);
  ~SlotMigrator();
  SlotMigrator(const SlotMigrator&) = delete;
  SlotMigrator& operator=(const SlotMigrator&) = delete;

  // Each new map, before it is served.
  void on_map(const cluster::SlotMap& next);

  struct Stats {
    uint64_t bytes_out = 0;
    uint64_t keys_dropped = 0;  // refused by the target for good
    uint64_t passes = 0, retries = 0;
    uint64_t slots_moving = 0;  // away from this node, in the newest map
    double pass_progress = 0;   // of the pass running now, 0..1 of the key space
    uint64_t last_pass_ms = 0, last_pass_bytes = 0;  // the last pass to finish
  };
  Stats stats() const;

 private:
  // The moves of one map: per slot, the target's index in `targets`.
  struct Plan {
    static constexpr uint16_t kStay = UINT16_MAX;
    uint64_t version = 0;
    // Bumped by every map whose moves differ from the one before it: two
    // plans of one epoch moved the same slots all along.
    uint64_t epoch = 0;
    std::vector<cluster::ClusterNode> targets;
    std::vector<uint16_t> target_of = std::vector<uint16_t>(cluster::kSlotCount, kStay);
    bool empty() const;
    bool same_moves(const Plan& other) const;
    const cluster::ClusterNode* target(uint16_t slot) const;
  };
  struct Connection;  // one target's link

  void run(std::stop_token stop);
  // Moves every key of `plan`'s slots; false if stopped or the plan changed.
  bool pass(std::stop_token& stop, const Plan& plan);
  bool move_batch(std::stop_token& stop, const Plan& plan, const cluster::ClusterNode& target,
                  std::vector<std::string> keys);
  // Sends `keys`, fenced, until every one's fate is known: OK (all moved),
  // Busy (the target refused some; they stay here), or another error when
  // nothing is in doubt (the link could not be made) or the plan changed.
  Status send_fenced(std::stop_token& stop, const Plan& plan, const cluster::ClusterNode& target,
                     const std::vector<std::string>& keys,
                     std::chrono::steady_clock::time_point since);
  // A logged-in link to `target` in link_; Busy (with the reply) if the
  // target refused the login.
  Status connect(const cluster::ClusterNode& target);
  // One attempt at sending `keys`; Busy (with the first reply) if the
  // target refused some, which stay here. The removals of those it took
  // report to `removals` once their tombstones land.
  Status send_batch(Connection& link, const std::vector<std::string>& keys, StatusWait& removals);
  Status send_large(Connection& link, const std::string& key, const ObjectInfo& info,
                    StatusWait& removals);
  // Reads the ASKING and SET replies of `key` and acts on them.
  Status settle(Connection& link, const std::string& key, uint64_t version, uint64_t size,
                StatusWait& removals);
  void publish_stall(const Plan& plan, const cluster::ClusterNode& target, const Status& why);
  void clear_stall();
  bool current(const Plan& plan) const;
  void set_link(std::unique_ptr<Connection> link);
  bool report(const Plan& plan);  // false if etcd did not take it
  bool pause(std::stop_token& stop, std::chrono::milliseconds d);

  Store& store_;
  KeyFence& fence_;
  Counter& keys_out_;
  const SlotMigratorOptions options_;
  mutable std::mutex mu_;
  std::condition_variable_any wake_;
  Plan latest_;  // of the newest map
  uint64_t generation_ = 0;
  // The stall this node has in etcd (migrator thread only).
  std::optional<cluster::MoveStall> stall_published_;
  std::chrono::steady_clock::time_point stall_published_at_;
  bool stall_unknown_ = true;  // a run before a restart may have left one
  // The migrator thread's link; link_mu_ guards swapping it, so that the
  // destructor can cut a send or receive that is blocked on it.
  std::mutex link_mu_;
  std::unique_ptr<Connection> link_;
  std::atomic<uint64_t> bytes_out_{0}, keys_dropped_{0}, passes_{0}, retries_{0};
  std::atomic<uint64_t> slots_moving_{0}, progress_cursor_{0};
  std::atomic<uint64_t> last_pass_ms_{0}, last_pass_bytes_{0};
  std::jthread thread_;
};

}  // namespace tierkv::server
