// KeyFence: makes moving a key to another node atomic with respect to this
// node's commands, as Redis's MIGRATE is (Redis blocks the source while it
// moves a key; tierkv blocks only the key).
//
// A command on a key of a slot that is moving away enters the fence before
// it is routed, and holds its Pass until it has finished (its reply may
// still wait for durability). The migrator fences a batch of keys: from
// then on, commands on them are refused (-TRYAGAIN, which cluster clients
// retry), and fence() returns once the commands that entered before are
// done. While a key is fenced nothing on this node changes it, so the
// value the migrator copies is the last one, and removing it after the new
// owner acknowledged leaves no write behind.
//
// Only slots that are moving pay for the fence (one mutex); the rest of the
// key space never reaches it. A pass shares ownership of its fence: a
// connection whose write was still landing at shutdown may be destroyed
// after the server let the fence go. Fences nest: a key stays fenced until
// every fence() that holds it has been undone (unfence(), or its timeout).
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/container/flat_hash_map.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"

namespace tierkv::server {

class KeyFence : public std::enable_shared_from_this<KeyFence> {
 public:
  // A command's hold on its keys: fence() waits for it to go.
  class Pass {
   public:
    Pass(Pass&& o) noexcept : fence_(std::move(o.fence_)), keys_(std::move(o.keys_)) {}
    Pass& operator=(Pass&& o) noexcept;
    ~Pass() { leave(); }

   private:
    friend class KeyFence;
    Pass(std::shared_ptr<KeyFence> fence, std::vector<std::string> keys)
        : fence_(std::move(fence)), keys_(std::move(keys)) {}
    void leave();
    std::shared_ptr<KeyFence> fence_;
    std::vector<std::string> keys_;
  };

  // A pass for `keys`, or nullopt if one of them is fenced. The fence must
  // be owned by a shared_ptr.
  std::optional<Pass> enter(std::span<const std::string_view> keys);
  // Fences `keys`, then waits until no pass holds one of them. False (and
  // this call's fence undone) if that takes longer than `timeout`.
  bool fence(std::span<const std::string> keys, std::chrono::milliseconds timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Undoes one successful fence() of `keys`.
  void unfence(std::span<const std::string> keys) ABSL_LOCKS_EXCLUDED(mu_);
  bool fenced(std::string_view key) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void leave(std::span<const std::string> keys) ABSL_LOCKS_EXCLUDED(mu_);
  bool held(std::span<const std::string> keys) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void drop_fences(std::span<const std::string> keys) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  CondVar left_;                                                            // a pass left
  absl::flat_hash_map<std::string, uint32_t> passes_ ABSL_GUARDED_BY(mu_);  // key -> passes
  absl::flat_hash_map<std::string, uint32_t> fences_ ABSL_GUARDED_BY(mu_);  // key -> fence()s
};

}  // namespace tierkv::server
