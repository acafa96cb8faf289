// A client's transaction state: MULTI's queue and WATCH's snapshots.
//
// WATCH is cheap because every write of an object gets a new version from
// one counter that only grows (versions are never reused, across keys or
// after a delete): WATCH stores the version and expiry the key has (0 for an
// absent or expired key) and EXEC compares them with what the key has then.
// Any write, DEL, FLUSHALL, expiry or TTL change by any client shows up as
// a difference. Only a key absent when watched needs help: a creation of it
// (even one deleted again) is counted for it by the memory tier.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/api_types.h"

namespace tierkv::server {

struct CommandSpec;

struct QueuedCommand {
  const CommandSpec* spec = nullptr;
  std::vector<std::string> args;  // the command's name included
};

struct WatchedKey {
  std::string key;
  uint64_t version = 0;  // 0: absent (or expired) when watched
  int64_t expire_at_ms = 0;
  // Absent when watched: tells whether it was created since (an absent key
  // has no version to compare).
  AbsentWatch absent;
};

struct TxnState {
  bool in_multi = false;
  // A command failed to queue (unknown, wrong arity, ...): EXEC answers
  // -EXECABORT, as Redis's CLIENT_DIRTY_EXEC.
  bool dirty = false;
  std::vector<QueuedCommand> queue;
  // What the queue holds: its arguments' bytes and a per-argument overhead.
  int64_t queued_bytes = 0;
  std::vector<WatchedKey> watched;

  // Leaves MULTI and forgets the watches (EXEC, DISCARD, RESET).
  void clear() {
    in_multi = false;
    dirty = false;
    queue.clear();
    queued_bytes = 0;
    watched.clear();
  }
};

}  // namespace tierkv::server
