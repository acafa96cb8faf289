// Eviction policies for the memory tier, behind one interface.
//
// A policy orders resident chunks; it never frees them. The tier embeds a
// PolicyHook in every chunk, calls insert/touch/remove under the shard lock,
// and asks evict() for a victim when it needs room. evict() consults the
// tier's `evictable` predicate so pinned and leased chunks are passed over;
// how a policy passes over one (rotate it, skip it) is the policy's choice.
//
// Background writeback needs the coldest entries without evicting them:
// next_cold() is a second hand that walks the policy's order from the
// coldest entry toward the warmest, one entry per call, and changes nothing.
// It resumes where it stopped, so a caller can walk a long list in short
// lock holds; each policy moves the hand off an entry it moves or removes,
// so the hand never points at a freed or relocated hook.
#pragma once

#include <absl/functional/function_ref.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

namespace tierkv::memory {

struct PolicyHook {
  PolicyHook* prev = nullptr;
  PolicyHook* next = nullptr;
  uint64_t id = 0;      // chunk identity (key hash x chunk index), for ghost queues
  uint32_t bytes = 0;   // charged size, for byte-balanced queues
  uint8_t freq = 0;     // policy-defined: access count or reference bit
  uint8_t queue = 0;    // policy-defined: which queue holds the entry
  bool linked = false;  // in some policy list
  // Not the policy's: the hook's owner keeps its own flags here (a chunk's
  // use-once, lease and detached bits), guarded by the lock that guards the
  // hook. It fills the hook's last byte, which would otherwise be padding.
  uint8_t owner_flags = 0;
};
static_assert(sizeof(PolicyHook) == 32);

enum class PolicyKind : uint8_t { kS3Fifo, kLru, kClock, kSieve };

std::string_view policy_name(PolicyKind kind);
std::optional<PolicyKind> parse_policy(std::string_view name);
inline constexpr PolicyKind kAllPolicies[] = {PolicyKind::kS3Fifo, PolicyKind::kLru,
                                              PolicyKind::kClock, PolicyKind::kSieve};

class EvictionPolicy {
 public:
  using Evictable = absl::FunctionRef<bool(const PolicyHook*)>;
  virtual ~EvictionPolicy() = default;

  virtual void insert(PolicyHook* hook) = 0;
  virtual void touch(PolicyHook* hook) = 0;
  // Unlinks an entry the tier drops for another reason (delete, overwrite).
  virtual void remove(PolicyHook* hook) = 0;
  // Unlinks and returns the next victim, or nullptr if nothing is evictable.
  virtual PolicyHook* evict(Evictable evictable) = 0;
  // Puts back an entry evict() returned that could not leave after all (the
  // lower tier refused or failed its write): where evict() will reach it
  // first, with no credit. insert() would treat it as new, and S3-FIFO's
  // ghost, which evict() has just fed, would even promote it to main.
  virtual void reinstate(PolicyHook* hook) = 0;
  // The entry at the writeback hand, which then steps one entry warmer, in
  // the order evict() would reach entries (reference bits aside). nullptr
  // once a walk has passed every entry; the next call starts a new walk at
  // the coldest. The hand never falls behind evict(): an entry evict() has
  // already passed over is not revisited in the same walk.
  virtual PolicyHook* next_cold() = 0;

  // Worst-case bytes of policy metadata per resident entry beyond the hook
  // itself (S3-FIFO's ghost queue); the tier charges it to the budget.
  virtual size_t overhead_per_entry() const { return 0; }
  virtual size_t entries() const = 0;
};

std::unique_ptr<EvictionPolicy> make_policy(PolicyKind kind);

}  // namespace tierkv::memory
