#include "store/sizing/mini_cache.h"

namespace tierkv {

MiniCache::MiniCache(memory::PolicyKind policy, uint64_t memory_bytes, uint64_t flash_bytes)
    : policy_(memory::make_policy(policy)),
      memory_capacity_(memory_bytes),
      flash_capacity_(flash_bytes) {}

size_t MiniCache::bytes_per_entry(memory::PolicyKind policy) {
  // A node of the map (key, hook, allocator header), its slot and control
  // byte, and what the policy keeps beside the hook (S3-FIFO's ghost).
  const size_t node = sizeof(uint64_t) + sizeof(memory::PolicyHook) + 16;
  return node + sizeof(void*) + 1 + memory::make_policy(policy)->overhead_per_entry();
}

bool MiniCache::read(uint64_t id, uint32_t bytes) {
  if (auto it = memory_.find(id); it != memory_.end()) {
    policy_->touch(&it->second);
    return true;
  }
  // A flash hit is promoted, its flash copy staying current; a miss is
  // filled. Of a size not known (0), only the write that follows fills it.
  const bool hit = flash_.contains(id);
  if (bytes > 0) insert_memory(id, bytes);
  return hit;
}

void MiniCache::write(uint64_t id, uint32_t bytes) {
  flash_.erase(id);
  auto it = memory_.find(id);
  if (it == memory_.end()) return insert_memory(id, bytes);
  memory_used_ += bytes;
  memory_used_ -= it->second.bytes;
  it->second.bytes = bytes;
  while (memory_used_ > memory_capacity_ && !memory_.empty()) evict_memory();
}

void MiniCache::remove(uint64_t id) {
  drop_memory(id);
  flash_.erase(id);
}

void MiniCache::insert_memory(uint64_t id, uint32_t bytes) {
  memory::PolicyHook& hook = memory_[id];
  hook.id = id;
  hook.bytes = bytes;
  policy_->insert(&hook);
  memory_used_ += bytes;
  while (memory_used_ > memory_capacity_ && !memory_.empty()) evict_memory();
}

void MiniCache::evict_memory() {
  memory::PolicyHook* victim = policy_->evict([](const memory::PolicyHook*) { return true; });
  if (victim == nullptr) return;
  const uint64_t id = victim->id;
  const uint32_t bytes = victim->bytes;
  if (flash_capacity_ == 0) filled_ = true;
  memory_used_ -= bytes;
  memory_.erase(id);
  // A value flash holds already is dropped from memory, not written again.
  if (flash_capacity_ > 0 && !flash_.contains(id)) append_flash(id, bytes);
}

void MiniCache::drop_memory(uint64_t id) {
  auto it = memory_.find(id);
  if (it == memory_.end()) return;
  policy_->remove(&it->second);
  memory_used_ -= it->second.bytes;
  memory_.erase(it);
}

void MiniCache::append_flash(uint64_t id, uint32_t bytes) {
  if (bytes > flash_capacity_) return;
  const uint64_t serial = next_serial_++;
  flash_[id] = FlashEntry{bytes, serial};
  log_.push_back(LogRecord{id, serial, bytes});
  log_bytes_ += bytes;
  trim_flash();
}

void MiniCache::trim_flash() {
  // Dead records hold their room until the log reaches them, as on flash.
  while (log_bytes_ > flash_capacity_ && !log_.empty()) {
    const LogRecord oldest = log_.front();
    log_.pop_front();
    log_bytes_ -= oldest.bytes;
    filled_ = true;
    auto it = flash_.find(oldest.id);
    if (it != flash_.end() && it->second.serial == oldest.serial) flash_.erase(it);
  }
}

}  // namespace tierkv
