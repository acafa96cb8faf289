// AbsentWatches: WATCH of a key that does not exist.
//
// WATCH compares a present key's version, but an absent key has no version
// of its own: a key created and deleted again between WATCH and EXEC would
// look unchanged, where Redis aborts the EXEC. So a watcher of an absent key
// registers its hash here, and every write that brings a key into being
// (a write that found no live object in memory, or a staged object made
// visible on the lower tier) counts a creation for a registered hash.
//
// Nothing is kept for keys nobody watches absent, and a creation costs one
// relaxed load while no such watch exists. Keys are told apart by their
// 64-bit hash: two keys would have to share it for a creation of one to
// abort a watch of the other.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/mutex.h"

namespace tierkv::memory {

class AbsentWatches : public std::enable_shared_from_this<AbsentWatches> {
 public:
  // One registered watch; unregisters when destroyed. Movable.
  class Handle {
   public:
    Handle() = default;
    Handle(Handle&& o) noexcept { *this = std::move(o); }
    Handle& operator=(Handle&& o) noexcept;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() { reset(); }

    // True if a key with the watched hash was created since the watch began.
    bool created_since() const;
    void reset();

   private:
    friend class AbsentWatches;
    std::shared_ptr<AbsentWatches> owner_;
    uint64_t hash_ = 0;
    uint64_t creations_at_watch_ = 0;
  };

  Handle watch(uint64_t key_hash);
  void note_created(uint64_t key_hash) {
    if (watchers_.load(std::memory_order_acquire) == 0) return;
    note_created_slow(key_hash);
  }
  size_t watched_hashes() const;

 private:
  struct Entry {
    uint64_t watchers = 0;
    uint64_t creations = 0;
  };
  void note_created_slow(uint64_t key_hash);
  uint64_t creations(uint64_t key_hash) const;
  void unwatch(uint64_t key_hash);

  std::atomic<uint64_t> watchers_{0};
  // core's Mutex, not absl::Mutex: ThreadSanitizer does not see Debian's
  // abseil locks (see memory_tier_internal.h).
  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tierkv::memory
