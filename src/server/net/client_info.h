// ClientInfo: what other threads read of one connection (CLIENT LIST,
// CLIENT KILL, maxmemory-clients): the connection's own thread publishes it
// as commands change it, and any thread reads it. The identity (names,
// user, protocol, flags) changes as a whole, under one lock; each counter
// is one atomic, read without it (a CLIENT LIST line may mix two moments,
// as Redis's may not, but each field is one the client had).
#pragma once

#include <absl/base/thread_annotations.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "core/mutex.h"

namespace tierkv::server {

struct CommandSpec;

class ClientInfo {
 public:
  struct Identity {
    std::string name;
    std::string lib_name;
    std::string lib_ver;
    std::string user;
    int proto = 2;
    bool no_evict = false;
    bool no_touch = false;
  };

  void publish(Identity identity) ABSL_LOCKS_EXCLUDED(mu_);
  Identity identity() const ABSL_LOCKS_EXCLUDED(mu_);
  std::string user() const ABSL_LOCKS_EXCLUDED(mu_);
  bool no_evict() const ABSL_LOCKS_EXCLUDED(mu_);

  // Commands queued in MULTI, or -1 outside it.
  void set_multi(int queued) {
    if (multi_.load(std::memory_order_relaxed) != queued)  // most commands: no change
      multi_.store(queued, std::memory_order_relaxed);
  }
  int multi() const { return multi_.load(std::memory_order_relaxed); }
  void set_last_active(int64_t ms) { last_active_ms_.store(ms, std::memory_order_relaxed); }
  int64_t last_active_ms() const { return last_active_ms_.load(std::memory_order_relaxed); }
  void set_last_command(const CommandSpec* spec) {
    last_spec_.store(spec, std::memory_order_relaxed);
  }
  const CommandSpec* last_command() const { return last_spec_.load(std::memory_order_relaxed); }
  // Output pending, and all the client holds (query buffer, output, MULTI
  // queue), as of its last batch or write.
  void set_memory(uint64_t output, uint64_t total) {
    output_bytes_.store(output, std::memory_order_relaxed);
    memory_bytes_.store(total, std::memory_order_relaxed);
  }
  uint64_t output_bytes() const { return output_bytes_.load(std::memory_order_relaxed); }
  uint64_t memory_bytes() const { return memory_bytes_.load(std::memory_order_relaxed); }
  // True the first time only: one CLIENT KILL closes the connection.
  bool mark_killed() { return !killed_.exchange(true); }

 private:
  mutable Mutex mu_;
  Identity identity_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> multi_{-1};
  std::atomic<int64_t> last_active_ms_{0};
  std::atomic<const CommandSpec*> last_spec_{nullptr};
  std::atomic<uint64_t> output_bytes_{0};
  std::atomic<uint64_t> memory_bytes_{0};
  std::atomic<bool> killed_{false};
};

}  // namespace tierkv::server
