// ClientRegistry: every connected client by id, for maxclients, CLIENT LIST,
// CLIENT KILL and maxmemory-clients.
//
// One mutex, taken on connect, disconnect and those commands. A connection
// removes itself before it is destroyed, so a connection found here is alive
// while the mutex is held; closing one (Connection::kill) only posts the
// close to its own I/O thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/metrics.h"
#include "core/mutex.h"
#include "server/commands/command.h"

namespace tierkv::server {

class Connection;

class ClientRegistry {
 public:
  // `evicted` counts the clients evict_over() closes.
  explicit ClientRegistry(Counter& evicted) : evicted_(evicted) {}

  // False (nothing added) if `max_clients` are registered already.
  bool add(Connection* c, int64_t max_clients);
  void remove(Connection* c);
  size_t count() const { return count_.load(std::memory_order_relaxed); }
  // CLIENT LIST: one line per client, by id.
  std::vector<std::string> lines(int64_t now_ms) const;
  // CLIENT KILL: closes the matching clients other than `self_id` (counted
  // once each, as Redis does), and says whether `self_id` matched.
  ClientKillResult kill(const ClientKillFilter& filter, uint64_t self_id);
  // maxmemory-clients: while all clients' buffers together pass `limit`,
  // closes the largest client that has not set CLIENT NO-EVICT.
  void evict_over(int64_t limit);

 private:
  Counter& evicted_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Connection*> clients_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> count_{0};
};

}  // namespace tierkv::server
