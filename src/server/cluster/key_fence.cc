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
  MutexLock lock(mu_);
  for (const std::string& k : held) {
    if (fences_.contains(k)) return std::nullopt;
  }
  for (const std::string& k : held) ++passes_[k];
  return Pass(shared_from_this(), std::move(held));
}

void KeyFence::leave(std::span<const std::string> keys) {
  {
    MutexLock lock(mu_);
    for (const std::string& k : keys) {
      auto it = passes_.find(k);
      if (it != passes_.end() && --it->second == 0) passes_.erase(it);
    }
  }
  left_.notify_all();
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
  MutexLock lock(mu_);
  for (const std::string& k : keys) ++fences_[k];
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (held(keys)) {
    if (!left_.wait_until(mu_, deadline) && held(keys)) {
      drop_fences(keys);
      return false;
    }
  }
  return true;
}

void KeyFence::unfence(std::span<const std::string> keys) {
  MutexLock lock(mu_);
  drop_fences(keys);
}

bool KeyFence::fenced(std::string_view key) const {
  MutexLock lock(mu_);
  return fences_.contains(absl::string_view(key.data(), key.size()));
}

}  // namespace tierkv::server
