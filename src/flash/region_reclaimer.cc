#include "flash/region_reclaimer.h"

#include "flash/region_manager.h"

namespace tierkv::flash {

RegionReclaimer::RegionReclaimer(Mutex& write_mu, RegionManager& regions, RegionCopier& copier)
    : write_mu_(write_mu), regions_(regions), copier_(copier) {}

void RegionReclaimer::start() {
  thread_ = std::thread([this] { run(); });
}

bool RegionReclaimer::wanted() const {
  return !stop_ && regions_.next_to_copy().has_value() && copier_.may_copy();
}

void RegionReclaimer::run() {
  MutexLock lock(write_mu_);
  while (!stop_) {
    if (!wanted()) {
      idle_.notify_all();
      // Also polls: the oldest region's last writes land without a signal.
      wake_.wait_for(write_mu_, std::chrono::milliseconds(20));
      continue;
    }
    const uint32_t region = *regions_.next_to_copy();
    regions_.mark_copied(region);
    copier_.mark_kept(region);
    round_in_progress_ = true;
    lock.unlock();
    copier_.read_kept();
    lock.lock();
    copier_.append_kept();
    lock.unlock();
    copier_.submit();
    lock.lock();
    round_in_progress_ = false;
  }
  idle_.notify_all();
}

bool RegionReclaimer::wait_idle(std::chrono::milliseconds timeout) {
  MutexLock lock(write_mu_);
  wake_.notify_one();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (busy()) {
    if (!idle_.wait_until(write_mu_, deadline)) return !busy();
  }
  return true;
}

void RegionReclaimer::stop() {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(write_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

}  // namespace tierkv::flash
