#include "flash/device_sync.h"

#include <unistd.h>

#include <chrono>

namespace tierkv::flash {

bool DeviceSync::sync_if_dirty(int fd) {
  if (!dirty_.exchange(false)) return true;
  if (::fdatasync(fd) != 0) return false;
  fsyncs_.add();
  return true;
}

void DeviceSync::start_every_second(int fd, std::function<void()> before_sync) {
  thread_ = std::thread([this, fd, before_sync = std::move(before_sync)] {
    MutexLock lock(mu_);
    while (!stop_) {
      cv_.wait_for(mu_, std::chrono::seconds(1));
      if (stop_) break;
      before_sync();
      (void)sync_if_dirty(fd);
    }
  });
}

void DeviceSync::stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace tierkv::flash
