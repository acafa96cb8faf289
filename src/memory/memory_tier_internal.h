// Shard layout shared by the memory tier's implementation files.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/container/flat_hash_set.h>

#include <memory>
#include <mutex>
#include <vector>

#include "core/mutex.h"
#include "memory/deadline_table.h"
#include "memory/hook_list.h"
#include "memory/memory_tier.h"
#include "memory/object.h"
#include "memory/policy/eviction_policy.h"

namespace tierkv::memory {

struct KeyRef {
  std::string_view key;
  uint64_t hash;
};

struct ObjectHash {
  using is_transparent = void;
  size_t operator()(const Object* o) const { return o->hash(); }
  size_t operator()(const KeyRef& k) const { return k.hash; }
};

struct ObjectEq {
  using is_transparent = void;
  bool operator()(const Object* a, const Object* b) const { return a == b; }
  bool operator()(const Object* a, const KeyRef& k) const {
    return a->hash() == k.hash && a->key() == k.key;
  }
  bool operator()(const KeyRef& k, const Object* a) const { return (*this)(a, k); }
};

using ObjectIndex = absl::flat_hash_set<Object*, ObjectHash, ObjectEq>;

// core's Mutex (a std::mutex), not absl::Mutex: Debian's abseil is built
// with its debug-mode deadlock detection on, which cost ~25% of a cached get.
struct alignas(64) MemoryShard {
  mutable Mutex mu;
  ObjectIndex index ABSL_GUARDED_BY(mu);
  std::unique_ptr<EvictionPolicy> policy ABSL_GUARDED_BY(mu);
  HookList use_once ABSL_GUARDED_BY(mu);
  // The expiry of each object with one, sampled by active expiry.
  TtlTable ttl ABSL_GUARDED_BY(mu);
  // Leased chunks, sampled by active expiry so that leases that ran out
  // unread stop counting against the lease cap without waiting for eviction.
  LeaseTable leases ABSL_GUARDED_BY(mu);
  int64_t index_charge ABSL_GUARDED_BY(mu) = 0;
  uint64_t chunks ABSL_GUARDED_BY(mu) = 0;
};

// Unlocks, on scope exit, a mutex the caller already holds.
class ABSL_SCOPED_LOCKABLE AdoptedLock {
 public:
  explicit AdoptedLock(Mutex& mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) : mu_(mu) {}
  ~AdoptedLock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  AdoptedLock(const AdoptedLock&) = delete;
  AdoptedLock& operator=(const AdoptedLock&) = delete;

 private:
  Mutex& mu_;
};

// Bytes a shard's index of this capacity occupies.
inline int64_t index_table_bytes(size_t capacity) {
  return flat_table_bytes(capacity, sizeof(Object*));
}

}  // namespace tierkv::memory
