#include "flash/region_reclaimer.h"

#include "flash/region_manager.h"

namespace tierkv::flash {

RegionReclaimer::RegionReclaimer(Mutex& write_mu, RegionManager& regions, RegionEvictor& evictor)
    : write_mu_(write_mu), regions_(regions), evictor_(evictor) {}

void RegionReclaimer::start() {
  thread_ = std::thread([this] { run(); });
}

bool RegionReclaimer::wanted() const {
  return !stop_ && regions_.reclaim_wanted() && evictor_.may_evict();
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
    evictor_.begin_eviction(regions_.take_victim());
    lock.unlock();
    evictor_.read_kept();
    lock.lock();
    evictor_.finish_eviction();
    lock.unlock();
    evictor_.submit();
    lock.lock();
  }
  idle_.notify_all();
}

bool RegionReclaimer::wait_idle(std::chrono::milliseconds timeout) {
  MutexLock lock(write_mu_);
  wake_.notify_one();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (wanted()) {
    if (!idle_.wait_until(write_mu_, deadline)) return !wanted();
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
