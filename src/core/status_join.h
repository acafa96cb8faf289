// StatusJoin: one callback that runs once after several asynchronous steps.
//
//   auto join = StatusJoin::make(keys.size(), std::move(done));
//   for (auto& k : keys) start(k, join->arrival());
//
// `done` runs after the last arrival, on that arrival's thread, with the
// first error reported (or OK). With zero steps it runs at once, from make().
// cancel() makes sure it never runs (the steps still arrive).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>

#include "core/mutex.h"
#include "core/status.h"

namespace tierkv {

class StatusJoin : public std::enable_shared_from_this<StatusJoin> {
 public:
  using Callback = std::function<void(Status)>;

  static std::shared_ptr<StatusJoin> make(size_t steps, Callback done) {
    if (steps == 0) {
      if (done) done(Status::ok());
      done = nullptr;
    }
    return std::shared_ptr<StatusJoin>(new StatusJoin(steps, std::move(done)));
  }

  // A callback to hand to one step; call each exactly once.
  Callback arrival() {
    return [self = shared_from_this()](Status st) { self->arrive(std::move(st)); };
  }

  // `done` will not run (unless it already did).
  void cancel() {
    MutexLock lock(mu_);
    done_ = nullptr;
  }

 private:
  StatusJoin(size_t steps, Callback done) : left_(steps), done_(std::move(done)) {}

  void arrive(Status st) {
    Status result;
    Callback done;
    {
      MutexLock lock(mu_);
      if (!st.is_ok() && first_error_.is_ok()) first_error_ = std::move(st);
      if (--left_ > 0) return;
      result = std::move(first_error_);
      done = std::move(done_);
    }
    if (done) done(std::move(result));
  }

  Mutex mu_;
  size_t left_ ABSL_GUARDED_BY(mu_);
  Status first_error_ ABSL_GUARDED_BY(mu_);
  Callback done_ ABSL_GUARDED_BY(mu_);  // taken once, by the last arrival
};

}  // namespace tierkv
