#include "memory/absent_watches.h"

#include <utility>

namespace tierkv::memory {

AbsentWatches::Handle& AbsentWatches::Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = std::move(o.owner_);
    hash_ = o.hash_;
    creations_at_watch_ = o.creations_at_watch_;
  }
  return *this;
}

bool AbsentWatches::Handle::created_since() const {
  return owner_ != nullptr && owner_->creations(hash_) != creations_at_watch_;
}

void AbsentWatches::Handle::reset() {
  if (owner_ == nullptr) return;
  owner_->unwatch(hash_);
  owner_.reset();
}

AbsentWatches::Handle AbsentWatches::watch(uint64_t key_hash) {
  Handle h;
  {
    MutexLock lock(mu_);
    Entry& e = entries_[key_hash];
    ++e.watchers;
    h.creations_at_watch_ = e.creations;
    // Raised under the lock: a creation that does not see it yet is
    // ordered before this watch, and so before the caller's look at the key.
    watchers_.fetch_add(1, std::memory_order_acq_rel);
  }
  h.owner_ = shared_from_this();
  h.hash_ = key_hash;
  return h;
}

void AbsentWatches::note_created_slow(uint64_t key_hash) {
  MutexLock lock(mu_);
  auto it = entries_.find(key_hash);
  if (it != entries_.end()) ++it->second.creations;
}

uint64_t AbsentWatches::creations(uint64_t key_hash) const {
  MutexLock lock(mu_);
  auto it = entries_.find(key_hash);
  return it == entries_.end() ? 0 : it->second.creations;
}

void AbsentWatches::unwatch(uint64_t key_hash) {
  MutexLock lock(mu_);
  auto it = entries_.find(key_hash);
  if (it == entries_.end()) return;
  if (--it->second.watchers == 0) entries_.erase(it);
  watchers_.fetch_sub(1, std::memory_order_acq_rel);
}

size_t AbsentWatches::watched_hashes() const {
  MutexLock lock(mu_);
  return entries_.size();
}

}  // namespace tierkv::memory
