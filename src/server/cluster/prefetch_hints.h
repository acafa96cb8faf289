// PrefetchHints: exists-prefetch-map across nodes. In cluster mode the
// companion of a probed key is often owned by another node (LMCache's
// untagged redis-cluster:// keys: <chunk>metadata and <chunk>kv_bytes hash
// to different slots). The probed node then hints the companion's owner,
// which prefetches it as its own probe would (TIER.PREFETCH).
//
// Contract:
// * hint() never blocks on the network and never fails the probe: the key
//   is queued for its owner, or dropped (counted) when max_pending keys
//   wait already, or while the owner's link is down;
// * a key hinted less than dedup_window ago is not hinted again (counted);
// * one thread owns every link: it sends each owner's waiting keys as one
//   TIER.PREFETCH of up to batch_keys keys, logged in as the cluster's links
//   are (peer_link.h), and reads the reply before the next; a link that
//   fails drops its batch (counted) and is made again after retry_pause;
// * a hint is only a hint: the owner prefetches the keys it owns and
//   ignores the rest, so a hint that races a slot move does no harm;
// * the destructor stops the thread, cutting a send or reply it waits on
//   (a link being made waits out io_timeout); hints after it are dropped.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/container/flat_hash_map.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cluster/slot_map.h"
#include "core/metrics.h"
#include "core/mutex.h"
#include "server/cluster/peer_link.h"

namespace tierkv::server {

// The CLIENT SETNAME of a hint link.
inline constexpr std::string_view kPrefetchHintsClientName = "tierkv-prefetch-hints";

// What the receiving side counts (TIER.PREFETCH): the keys named, and those
// of slots this node does not own (ignored).
struct PrefetchHintsReceived {
  explicit PrefetchHintsReceived(MetricsRegistry& metrics);
  Counter& received;
  Counter& ignored;
};

struct PrefetchHintsOptions {
  size_t max_pending = 4096;  // keys waiting for all owners together
  size_t batch_keys = 128;    // keys per TIER.PREFETCH
  std::chrono::milliseconds dedup_window{1000};
  std::chrono::milliseconds io_timeout{1000};
  std::chrono::milliseconds retry_pause{1000};  // after a link failed
  std::function<MigratorCredentials()> credentials;
};

class PrefetchHints {
 public:
  PrefetchHints(PrefetchHintsOptions options, MetricsRegistry& metrics);
  ~PrefetchHints();
  PrefetchHints(const PrefetchHints&) = delete;
  PrefetchHints& operator=(const PrefetchHints&) = delete;

  // Queues `key` for `owner` (see the contract). Any thread.
  void hint(std::string_view key, const cluster::ClusterNode& owner);

  struct Stats {
    uint64_t sent = 0, dropped = 0, deduplicated = 0;
  };
  Stats stats() const;

 private:
  struct Owner {
    cluster::ClusterNode node;
    std::vector<std::string> keys;
  };
  using Clock = std::chrono::steady_clock;
  void run(std::stop_token stop);
  // Sends one owner's batch on its link (made if needed); false if the
  // link failed.
  bool send(const cluster::ClusterNode& node, const std::vector<std::string>& keys);
  bool recently_hinted(std::string_view key, Clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PrefetchHintsOptions options_;
  Counter& sent_;
  Counter& dropped_;
  Counter& deduplicated_;
  mutable Mutex mu_;
  CondVar wake_;
  absl::flat_hash_map<std::string, Owner> waiting_ ABSL_GUARDED_BY(mu_);  // by node id
  size_t waiting_keys_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Clock::time_point> recent_ ABSL_GUARDED_BY(mu_);  // key hash
  absl::flat_hash_map<std::string, Clock::time_point> down_until_ ABSL_GUARDED_BY(mu_);
  RespClient* sending_ ABSL_GUARDED_BY(mu_) = nullptr;  // the link a batch is on
  // Owned by the thread alone: one link per owner, by node id.
  absl::flat_hash_map<std::string, std::unique_ptr<RespClient>> links_;
  std::jthread thread_;
};

}  // namespace tierkv::server
