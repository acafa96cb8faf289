#include "server/cluster/slot_purger.h"

#include <spdlog/spdlog.h>

#include "cluster/key_slot.h"

namespace tierkv::server {

SlotPurger::SlotPurger(Store& store, std::string self_id)
    : store_(store),
      self_id_(std::move(self_id)),
      pending_(cluster::kSlotCount),
      thread_([this](std::stop_token stop) { run(stop); }) {}

SlotPurger::~SlotPurger() {
  thread_.request_stop();
  wake_.notify_all();
}

void SlotPurger::mark(const cluster::SlotMap* old, const cluster::SlotMap& next) {
  const std::optional<size_t> self_next = next.index_of(self_id_);
  if (!self_next) return;
  const std::optional<size_t> self_old = old ? old->index_of(self_id_) : std::nullopt;
  size_t marked = 0;
  std::lock_guard lock(mu_);
  const uint64_t generation = ++generation_;
  // A slot is this node's when it owns it or imports it (its keys arrive
  // before the map flips): either way, keys it kept from before are stale.
  auto mine = [](const cluster::SlotMap& map, uint16_t slot, size_t self) {
    return map.owner(slot) == self || map.moving_to(slot) == self;
  };
  for (uint32_t s = 0; s < cluster::kSlotCount; ++s) {
    const auto slot = static_cast<uint16_t>(s);
    // The first map (after a start): owned slots keep what flash kept, but
    // a slot being imported starts over, as its old owner sends it all again.
    const bool had =
        old == nullptr ? next.owner(slot) == *self_next : self_old && mine(*old, slot, *self_old);
    if (!mine(next, slot, *self_next) || had) continue;
    pending_[s].store(generation, std::memory_order_release);
    ++marked;
  }
  if (marked > 0) {
    spdlog::info("cluster: {} slots gained with map version {}; their old keys go first", marked,
                 next.version());
    wake_.notify_all();
  }
}

void SlotPurger::run(std::stop_token stop) {
  uint64_t done = 0;  // every mark up to this generation is purged
  while (!stop.stop_requested()) {
    uint64_t target;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, stop, [&] { return generation_ > done; });
      if (stop.stop_requested()) return;
      target = generation_;
    }
    purge_pass(stop, target);
    if (stop.stop_requested()) return;
    // Marks up to `target` were set before this pass began: they are done.
    for (auto& p : pending_) {
      uint64_t g = p.load(std::memory_order_acquire);
      if (g != 0 && g <= target) p.compare_exchange_strong(g, 0, std::memory_order_acq_rel);
    }
    done = target;
  }
}

void SlotPurger::purge_pass(std::stop_token& stop, uint64_t generation) {
  uint64_t cursor = 0;
  uint64_t removed = 0;
  do {
    ScanPage page = store_.scan(cursor, 1000);
    for (const std::string& key : page.keys) {
      const uint64_t g = pending_[cluster::key_slot(key)].load(std::memory_order_acquire);
      if (g != 0 && g <= generation && store_.remove(key)) ++removed;
    }
    cursor = page.next_cursor;
  } while (cursor != 0 && !stop.stop_requested());
  keys_purged_.fetch_add(removed, std::memory_order_relaxed);
  if (removed > 0) spdlog::info("cluster: removed {} old keys of gained slots", removed);
}

}  // namespace tierkv::server
