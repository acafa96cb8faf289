#include "server/cluster/key_fence.h"

namespace tierkv::server {

KeyFence::Pass& KeyFence::Pass::operator=(Pass&& o) noexcept {
  if (this != &o) {
    leave();
    fence_ = std::move(o.fence_);
    keys_ = std::move(o.keys_);
  }
  return *this;
}

void KeyFence::Pass::leave() {
  if (std::shared_ptr<KeyFence> fence = std::move(fence_)) fence->leave(keys_);
}

std::optional<KeyFence::Pass> KeyFence::enter(std::span<const std::string_view> keys) {
  std::vector<std::string> held(keys.begin(), keys.end());
  absl::MutexLock lock(&mu_);
  for (const std::string& k : held) {
    if (fences_.contains(k)) return std::nullopt;
  }
  for (const std::string& k : held) ++passes_[k];
  return Pass(shared_from_this(), std::move(held));
}

void KeyFence::leave(std::span<const std::string> keys) {
  absl::MutexLock lock(&mu_);  // fence()'s wait re-checks as the lock is let go
  for (const std::string& k : keys) {
    auto it = passes_.find(k);
    if (it != passes_.end() && --it->second == 0) passes_.erase(it);
  }
}

bool KeyFence::held(std::span<const std::string> keys) const {
  for (const std::string& k : keys) {
    if (passes_.contains(k)) return true;
  }
  return false;
}

void KeyFence::drop_fences(std::span<const std::string> keys) {
  for (const std::string& k : keys) {
    auto it = fences_.find(k);
    if (it != fences_.end() && --it->second == 0) fences_.erase(it);
  }
}

bool KeyFence::fence(std::span<const std::string> keys, std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  for (const std::string& k : keys) ++fences_[k];
  // The condition runs with mu_ held, which the analysis cannot see
  // through absl::Condition.
  auto none_held = [this, keys]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !held(keys); };
  if (mu_.AwaitWithTimeout(absl::Condition(&none_held), absl::FromChrono(timeout))) return true;
  drop_fences(keys);
  return false;
}

void KeyFence::unfence(std::span<const std::string> keys) {
  absl::MutexLock lock(&mu_);
  drop_fences(keys);
}

bool KeyFence::fenced(std::string_view key) const {
  absl::MutexLock lock(&mu_);
  return fences_.contains(absl::string_view(key.data(), key.size()));
}

}  // namespace tierkv::server
