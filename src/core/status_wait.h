// StatusWait: waits, on the caller's thread, for asynchronous steps whose
// number is known only as they start (StatusJoin is for a known number).
//
//   StatusWait wait;
//   for (auto& k : keys) store.remove(k, {}, wait.arrival());
//   Status st = wait.wait();  // every step's callback has run
//
// Each arrival() must be called exactly once, from any thread. wait()
// returns the first error reported, or OK; the object must outlive every
// callback, which wait() guarantees when it is called before destruction.
#pragma once

#include <cstddef>
#include <functional>

#include "core/mutex.h"
#include "core/status.h"

namespace tierkv {

class StatusWait {
 public:
  StatusWait() = default;
  StatusWait(const StatusWait&) = delete;
  StatusWait& operator=(const StatusWait&) = delete;
  ~StatusWait() { (void)wait(); }

  std::function<void(Status)> arrival() {
    {
      MutexLock lock(mu_);
      ++pending_;
    }
    return [this](Status st) { arrive(std::move(st)); };
  }

  Status wait() {
    MutexLock lock(mu_);
    while (pending_ != 0) arrived_.wait(mu_);
    return first_error_;
  }

 private:
  void arrive(Status st) {
    MutexLock lock(mu_);
    if (!st.is_ok() && first_error_.is_ok()) first_error_ = std::move(st);
    if (--pending_ == 0) arrived_.notify_all();
  }

  Mutex mu_;
  CondVar arrived_;
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tierkv
