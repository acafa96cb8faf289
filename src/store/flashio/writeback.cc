#include "store/flashio/writeback.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace tierkv {

Writeback::Writeback(memory::MemoryTier& memory, flash::FlashTier& flash, FlashOffloader& offloader,
                     MetricsRegistry& metrics, double dirty_max_fraction)
    : memory_(memory),
      flash_(flash),
      offloader_(offloader),
      objects_(metrics.counter("tierkv_writeback_objects_total",
                               "dirty objects copied to flash in the background (they stay "
                               "in memory, clean)")),
      bytes_(metrics.counter("tierkv_writeback_bytes_total",
                             "value bytes copied to flash in the background")),
      inflight_(metrics.gauge("tierkv_writeback_inflight_bytes",
                              "value bytes of background copies not yet landed")),
      fraction_(dirty_max_fraction) {
  thread_ = std::thread([this] { run(); });
}

Writeback::~Writeback() {
  stop();
}

void Writeback::set_dirty_max_fraction(double fraction) {
  fraction_.store(fraction, std::memory_order_relaxed);
  {
    MutexLock lock(mu_);
    wake_ = true;
  }
  cv_.notify_all();
}

void Writeback::stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Writeback::run() {
  MutexLock lock(mu_);
  while (!stop_) {
    lock.unlock();
    bool more = step();
    lock.lock();
    if (more || stop_) continue;
    // Disabled: nothing to look at until the fraction changes.
    const bool disabled = fraction_.load(std::memory_order_relaxed) >= 1.0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kPollMs);
    while (!stop_ && !wake_) {
      if (disabled) {
        cv_.wait(mu_);
      } else if (!cv_.wait_until(mu_, deadline)) {
        break;
      }
    }
    wake_ = false;
  }
}

bool Writeback::step() {
  double fraction = fraction_.load(std::memory_order_relaxed);
  if (fraction >= 1.0) return false;
  auto limit = static_cast<int64_t>(fraction * static_cast<double>(memory_.budget_bytes()));
  int64_t excess = memory_.dirty_bytes() - limit;
  if (excess <= 0) return false;
  int64_t room = room_bytes();
  if (room <= 0) return false;
  std::vector<memory::OffloadItem> items =
      memory_.take_cold_dirty(std::min(excess, room), kStepsPerShard);
  bool submitted = false;
  for (memory::OffloadItem& item : items) submitted = submit(std::move(item)) || submitted;
  return submitted;
}

int64_t Writeback::room_bytes() const {
  const auto queue = static_cast<int64_t>(flash_.max_pending_write_bytes());
  const int64_t pending = static_cast<int64_t>(flash_.pending_write_bytes());
  const int64_t inflight = inflight_.value();
  // The upper half of the flash queue is left to writers and evictions.
  int64_t flash_room = queue / 2 - pending;
  int64_t own_room = std::min(queue / 4, memory_.budget_bytes() / 16) - inflight;
  if (flash_room <= 0) return 0;
  // An object larger than the cap goes alone, on an idle flash queue.
  if (inflight == 0 && pending == 0) return std::max<int64_t>(std::min(flash_room, own_room), 1);
  return std::min(flash_room, own_room);
}

bool Writeback::submit(memory::OffloadItem&& item) {
  const auto bytes = static_cast<int64_t>(item.size);
  inflight_.add(bytes);
  Status st = offloader_.write_copy(std::move(item), [this, bytes](Status s) { landed(bytes, s); });
  // Refused (the queue filled meanwhile): the offloader put the object back
  // to dirty, and a later pass tries it again.
  if (!st.is_ok()) inflight_.add(-bytes);
  return st.is_ok();
}

// On a flash I/O thread (or in submit(), for an object replaced meanwhile).
void Writeback::landed(int64_t bytes, const Status& result) {
  inflight_.add(-bytes);
  if (result.is_ok()) {
    objects_.add();
    bytes_.add(static_cast<uint64_t>(bytes));
  }
  {
    MutexLock lock(mu_);
    wake_ = true;
  }
  cv_.notify_one();
}

}  // namespace tierkv
