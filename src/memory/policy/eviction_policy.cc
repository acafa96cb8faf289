#include "memory/policy/eviction_policy.h"

#include "memory/policy/policies.h"

namespace tierkv::memory {

std::unique_ptr<EvictionPolicy> make_policy(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kS3Fifo:
      return make_s3fifo_policy();
    case PolicyKind::kLru:
      return make_lru_policy();
    case PolicyKind::kClock:
      return make_clock_policy();
    case PolicyKind::kSieve:
      return make_sieve_policy();
  }
  return make_s3fifo_policy();
}

std::string_view policy_name(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kS3Fifo:
      return "s3fifo";
    case PolicyKind::kLru:
      return "lru";
    case PolicyKind::kClock:
      return "clock";
    case PolicyKind::kSieve:
      return "sieve";
  }
  return "unknown";
}

std::optional<PolicyKind> parse_policy(std::string_view name) {
  for (PolicyKind k : kAllPolicies) {
    if (policy_name(k) == name) return k;
  }
  return std::nullopt;
}

}  // namespace tierkv::memory
