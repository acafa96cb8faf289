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
  std::lock_guard lock(mu_);
  for (const std::string& k : held) {
    if (fenced_.contains(k)) return std::nullopt;
  }
  for (const std::string& k : held) ++passes_[k];
  return Pass(shared_from_this(), std::move(held));
}

void KeyFence::leave(std::span<const std::string> keys) {
  std::lock_guard lock(mu_);
  for (const std::string& k : keys) {
    auto it = passes_.find(k);
    if (it != passes_.end() && --it->second == 0) passes_.erase(it);
  }
  left_.notify_all();
}

bool KeyFence::held(std::span<const std::string> keys) const {
  for (const std::string& k : keys) {
    if (passes_.contains(k)) return true;
  }
  return false;
}

bool KeyFence::fence(std::span<const std::string> keys, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  for (const std::string& k : keys) fenced_.insert(k);
  if (left_.wait_for(lock, timeout, [&] { return !held(keys); })) return true;
  for (const std::string& k : keys) fenced_.erase(k);
  return false;
}

void KeyFence::unfence(std::span<const std::string> keys) {
  std::lock_guard lock(mu_);
  for (const std::string& k : keys) fenced_.erase(k);
}

bool KeyFence::fenced(std::string_view key) const {
  std::lock_guard lock(mu_);
  return fenced_.contains(absl::string_view(key.data(), key.size()));
}

}  // namespace tierkv::server
