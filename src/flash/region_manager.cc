#include "flash/region_manager.h"

#include "flash/region_reclaimer.h"
#include "flash/reinsertion_policy.h"

namespace tierkv::flash {

namespace {

// Written regions, oldest first, the reclaimer copies from before writers
// need them (fewer on tiny devices): a round's own copies can take the
// oldest region's turn, and the next round must be ready by then.
size_t copy_ahead(size_t regions) {
  return regions >= 8 ? 2 : 1;
}

}  // namespace

RegionManager::RegionManager(Gauge& draining) : draining_gauge_(draining) {}

RegionManager::~RegionManager() {
  stop_reclaimer();
}

void RegionManager::reset(uint32_t count) {
  states_.assign(count, RegionState{});
  free_.clear();
  fifo_.clear();
  used_bytes_ = 0;
  copied_seq_ = 0;
  MutexLock pins(pin_mu_);
  readers_.assign(count, 0);
  draining_.assign(count, false);
  draining_count_ = 0;
  draining_gauge_.set(0);
}

void RegionManager::restore_written(uint32_t r, uint64_t seq, uint64_t fill) {
  RegionState& st = states_[r];
  st = RegionState{};
  st.seq = seq;
  st.fill = fill;
  st.header_landed = true;
  used_bytes_ += fill;
  fifo_.push_back(r);
}

void RegionManager::finish_restore() {
  std::vector<bool> written(states_.size(), false);
  for (uint32_t r : fifo_) written[r] = true;
  for (uint32_t r = 0; r < count(); ++r) {
    if (!written[r]) free_.push_back(r);
  }
}

void RegionManager::free_all() {
  for (RegionState& st : states_) st = RegionState{};
  free_.clear();
  for (uint32_t r = 0; r < count(); ++r) free_.push_back(r);
  fifo_.clear();
  used_bytes_ = 0;
  MutexLock pins(pin_mu_);
  draining_.assign(states_.size(), false);
  draining_count_ = 0;
  draining_gauge_.set(0);
}

std::optional<uint32_t> RegionManager::take_free() {
  if (free_.empty()) return std::nullopt;
  const uint32_t r = free_.front();
  free_.pop_front();
  return r;
}

void RegionManager::start_written(uint32_t r, uint64_t seq) {
  states_[r] = RegionState{};
  states_[r].seq = seq;
  fifo_.push_back(r);
}

void RegionManager::add_fill(uint32_t r, uint64_t bytes) {
  states_[r].fill += bytes;
  used_bytes_ += bytes;
}

std::optional<uint32_t> RegionManager::next_victim() const {
  if (fifo_.empty() || states_[fifo_.front()].pending_writes > 0) return std::nullopt;
  return fifo_.front();
}

uint32_t RegionManager::take_victim() {
  const uint32_t r = fifo_.front();
  fifo_.pop_front();
  return r;
}

std::optional<uint32_t> RegionManager::next_to_copy() const {
  const size_t ahead = copy_ahead(states_.size());
  if (free_.size() >= ahead || fifo_.size() < 2) return std::nullopt;
  const size_t oldest = std::min(ahead, fifo_.size() - 1);
  for (size_t i = 0; i < oldest; ++i) {
    const RegionState& st = states_[fifo_[i]];
    if (st.seq <= copied_seq_) continue;
    if (st.pending_writes > 0) return std::nullopt;
    return fifo_[i];
  }
  return std::nullopt;
}

void RegionManager::empty(uint32_t r) {
  RegionState& st = states_[r];
  used_bytes_ -= st.fill;
  st.fill = 0;
  st.seq = 0;
}

RegionManager::ReclaimPins RegionManager::reclaim_locked(uint32_t r, bool self_pin) {
  ReclaimPins out;
  out.read_by_others = readers_[r] > 0;
  if (self_pin) ++readers_[r];
  out.writable = readers_[r] == 0;
  if (!out.writable) {
    draining_[r] = true;
    draining_gauge_.set(static_cast<int64_t>(++draining_count_));
  }
  return out;
}

absl::InlinedVector<uint32_t, 4> RegionManager::unpin(std::span<const uint32_t> regions) {
  absl::InlinedVector<uint32_t, 4> last_pins;
  MutexLock pins(pin_mu_);
  for (uint32_t r : regions) {
    // Freeing a region needs the write lock, taken before pin_mu.
    if (readers_[r] == 1 && draining_[r]) {
      last_pins.push_back(r);
    } else {
      --readers_[r];
    }
  }
  return last_pins;
}

void RegionManager::unpin_last(uint32_t r) {
  MutexLock pins(pin_mu_);
  if (--readers_[r] > 0 || !draining_[r]) return;
  draining_[r] = false;
  draining_gauge_.set(static_cast<int64_t>(--draining_count_));
  free_.push_back(r);
}

uint64_t RegionManager::draining_count() const {
  MutexLock pins(pin_mu_);
  return draining_count_;
}

void RegionManager::start_reclaimer(Mutex& write_mu, RegionCopier& copier,
                                    std::unique_ptr<ReinsertionPolicy> policy) {
  stop_reclaimer();
  reinsertion_ = std::move(policy);
  reclaimer_ = std::make_unique<RegionReclaimer>(write_mu, *this, copier);
  reclaimer_->start();
}

void RegionManager::stop_reclaimer() {
  if (reclaimer_) reclaimer_->stop();
}

void RegionManager::wake_reclaimer() {
  if (reclaimer_) reclaimer_->wake();
}

bool RegionManager::wait_for_reclaimer(std::chrono::milliseconds timeout) {
  return !reclaimer_ || reclaimer_->wait_idle(timeout);
}

bool RegionManager::persist(absl::FunctionRef<bool(const void*, size_t)> put) const {
  for (const RegionState& st : states_) {
    const uint64_t pair[2] = {st.seq, st.fill};
    if (!put(pair, sizeof(pair))) return false;
  }
  for (uint32_t r : fifo_) {
    if (!put(&r, sizeof(r))) return false;
  }
  return true;
}

const char* RegionManager::restore(absl::FunctionRef<bool(void*, size_t)> get, uint32_t written,
                                   uint64_t region_size) {
  std::vector<std::pair<uint64_t, uint64_t>> table(states_.size());
  for (auto& [seq, fill] : table) {
    uint64_t pair[2];
    if (!get(pair, sizeof(pair))) return "truncated region table";
    seq = pair[0];
    fill = pair[1];
    if (fill > region_size) return "implausible region fill";
  }
  std::vector<bool> live(states_.size(), false);
  for (uint32_t i = 0; i < written; ++i) {
    uint32_t r = 0;
    if (!get(&r, sizeof(r)) || r >= states_.size() || live[r]) return "bad region order";
    live[r] = true;
    restore_written(r, table[r].first, table[r].second);
  }
  return nullptr;
}

}  // namespace tierkv::flash
