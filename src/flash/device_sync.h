// DeviceSync: the fdatasync side of the flash file. Landed writes mark it
// dirty; sync_if_dirty() calls fdatasync only if something was written since
// the last one. With fsync=everysec a thread of its own does that once a
// second. Counts the fdatasync calls that succeeded. Internal to the flash
// tier.
#pragma once

#include <atomic>
#include <functional>
#include <thread>

#include "core/metrics.h"
#include "core/mutex.h"

namespace tierkv::flash {

class DeviceSync {
 public:
  explicit DeviceSync(Counter& fsyncs) : fsyncs_(fsyncs) {}
  ~DeviceSync() { stop(); }
  DeviceSync(const DeviceSync&) = delete;
  DeviceSync& operator=(const DeviceSync&) = delete;

  void mark_dirty() { dirty_.store(true, std::memory_order_relaxed); }
  // A sync made by the caller itself (and counted by it).
  void mark_synced() { dirty_.store(false, std::memory_order_relaxed); }
  // fdatasync of `fd` if anything landed since the last one; false if it
  // was needed and failed.
  bool sync_if_dirty(int fd);
  // fsync=everysec: once a second until stop(), `before_sync` (which sends
  // what waits to be written), then sync_if_dirty(fd).
  void start_every_second(int fd, std::function<void()> before_sync);
  void stop();

 private:
  Counter& fsyncs_;
  std::atomic<bool> dirty_{false};
  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tierkv::flash
