// SlotMigrator: moves the keys of the slots this node gives away to their
// new owners while clients follow -ASK, then reports the move (MoveReport,
// in etcd) so the controller flips the map.
//
// Whenever the map has slots moving away from this node, a pass scans the
// key space once (Store::scan, once the store has loaded: before, the keys
// on flash are not in it) and moves every key of those slots, batch by
// batch, on `streams` links per target at once (each key always on the
// same one, so its batches never overlap):
// * the batch is fenced (KeyFence): commands on its keys get -TRYAGAIN,
//   and the ones already running finish first;
// * a KeySender sends it (key_sender.h): values straight from their
//   chunks, a key the target took removed here, its tombstone on the
//   device before the fence lifts, so a restart of this node never serves
//   it again nor sends it over a newer value;
// * the link logs in as masterauth (and masteruser) says, or as
//   requirepass when masterauth is empty;
// * a refusal that is not for good (NOAUTH, WRONGPASS, IOERR, ...) leaves
//   the key here, and the batch goes again after a pause; one that needs
//   the operator, or a failure that lasts longer than `io_timeout`, is
//   published as a MoveStall (tierkv cluster drain exits 1 with it);
// * if the connection fails, the keys in doubt stay fenced and the batch
//   is sent again until it lands or the map stops moving its slots.
// No key of a moving slot is created here meanwhile (the router sends a
// missing key to the target), so after one full pass the slots are empty
// here, and the report says so for that map version. A newer map that
// moves the same slots to the same targets, with no map between them that
// moved others, is reported at once; any other starts a new pass (a slot
// that moves away, comes back and moves away again has keys again).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd_client.h"
#include "cluster/move_report.h"
#include "cluster/slot_map.h"
#include "core/metrics.h"
#include "core/mutex.h"
#include "core/status_wait.h"
#include "server/cluster/key_fence.h"
#include "server/cluster/key_sender.h"
#include "store/store.h"

namespace tierkv::server {

struct SlotMigratorOptions {
  std::vector<std::string> etcd_endpoints;
  cluster::EtcdSecurity etcd_security;  // TLS files and login (etcd_client.h)
  std::string cluster_name;
  std::string self_id;
  size_t batch_keys = 64;
  size_t streams = 4;     // threads sending at once, each with a link per target
  KeySenderOptions send;  // its io_timeout also bounds a failure before a stall
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
  struct Batch {
    std::shared_ptr<const Plan> plan;
    uint16_t target;
    std::vector<std::string> keys;
  };
  // One sending thread, its batches and its links (one per target).
  struct Stream {
    // Guarded by the migrator's mu_ (a nested struct cannot name it).
    std::deque<Batch> batches;
    bool busy = false;                                        // running a batch
    std::map<std::string, std::unique_ptr<KeySender>> links;  // swapped under link_mu_
    std::thread thread;
  };

  void run(std::stop_token stop);
  void run_stream(std::stop_token stop, Stream& stream);
  // Moves every key of `plan`'s slots; false if stopped or the plan changed.
  bool pass(std::stop_token stop, const std::shared_ptr<const Plan>& plan);
  // Hands `batch` to `stream` once it has room; false if the pass failed.
  bool submit(std::stop_token stop, Stream& stream, Batch batch);
  // Waits for every stream to finish its batches; false if one failed.
  bool drain_streams(std::stop_token stop);
  bool move_batch(std::stop_token stop, Stream& stream, const Batch& batch);
  // Sends `keys`, fenced, until every one's fate is known: OK (all moved),
  // Busy (the target refused some; they stay here), or another error when
  // nothing is in doubt (the link could not be made) or the plan changed.
  Status send_fenced(std::stop_token stop, Stream& stream, const Batch& batch,
                     std::chrono::steady_clock::time_point since);
  // The stream's logged-in link to `target`; Busy (with the reply) if the
  // target refused the login.
  Result<KeySender*> link(Stream& stream, const cluster::ClusterNode& target);
  void set_link(Stream& stream, const std::string& address, std::unique_ptr<KeySender> link);
  void publish_stall(const Plan& plan, const cluster::ClusterNode& target, const Status& why);
  // `after_batch`: at most one etcd attempt a second after a failed one, so
  // that an etcd outage does not hold every stream for its timeout per batch.
  void clear_stall(bool after_batch = false);
  bool current(const Plan& plan) const;
  bool report(const Plan& plan);  // false if etcd did not take it
  bool pause(std::stop_token stop, std::chrono::milliseconds d);

  Store& store_;
  KeyFence& fence_;
  MoveCounters counters_;
  const SlotMigratorOptions options_;
  mutable Mutex mu_;
  StopCondVar wake_;                  // a new map, a stream's progress, or stop
  Plan latest_ ABSL_GUARDED_BY(mu_);  // of the newest map
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool pass_failed_ ABSL_GUARDED_BY(mu_) = false;  // a stream gave up on a batch of this pass
  // The stall this node has in etcd.
  Mutex stall_mu_;
  std::optional<cluster::MoveStall> stall_published_ ABSL_GUARDED_BY(stall_mu_);
  std::chrono::steady_clock::time_point stall_published_at_ ABSL_GUARDED_BY(stall_mu_);
  // A run before a restart may have left one.
  bool stall_unknown_ ABSL_GUARDED_BY(stall_mu_) = true;
  std::chrono::steady_clock::time_point stall_clear_failed_at_ ABSL_GUARDED_BY(stall_mu_);
  // link_mu_ guards swapping the streams' links (Stream::links, which a
  // nested struct cannot annotate), so that the destructor can cut a send
  // or receive that is blocked on one.
  Mutex link_mu_;
  std::atomic<uint64_t> passes_{0}, retries_{0};
  std::atomic<uint64_t> slots_moving_{0}, progress_cursor_{0};
  std::atomic<uint64_t> last_pass_ms_{0}, last_pass_bytes_{0};
  std::stop_source stop_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::thread thread_;
};

}  // namespace tierkv::server
