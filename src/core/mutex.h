// Mutex, MutexLock, CondVar, StopCondVar: a std::mutex that clang's -Wthread-safety
// analysis understands (as LevelDB's port::Mutex is), so that members can
// say ABSL_GUARDED_BY(mu_) and functions ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_),
// and the thread-safety build (scripts/test.sh, stage "locks")
// checks every access. libstdc++'s std::mutex and std::lock_guard carry no
// annotations; absl::Mutex does, but Debian's abseil is built with its
// deadlock detection on, which cost about 25 % of a cached GET in the
// memory tier. This wrapper costs nothing over std::mutex.
#pragma once

#include <absl/base/thread_annotations.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>

namespace tierkv {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds the lock (checked by nothing else).
  void assert_held() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  friend class StopCondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope; unlock() and lock() let go of it and take it
// again in between (the destructor unlocks only if held).
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() ABSL_UNLOCK_FUNCTION() {
    held_ = false;
    mu_.unlock();
  }
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// A condition variable over a Mutex the caller holds.
class CondVar {
 public:
  void wait(Mutex& mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // False if `timeout` passed without a notify (spurious wakes return true).
  template <typename Rep, typename Period>
  bool wait_for(Mutex& mu, std::chrono::duration<Rep, Period> timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return wait_until(mu, std::chrono::steady_clock::now() + timeout);
  }
  template <typename Clock, typename Duration>
  bool wait_until(Mutex& mu, std::chrono::time_point<Clock, Duration> deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool notified = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return notified;
  }
  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

// A condition variable whose waits also end when a std::stop_token is
// stopped, for the loops a std::jthread runs (std::condition_variable_any
// underneath). The predicate runs with `mu` held; a lambda that reads
// guarded members says so with mu.assert_held(), since the analysis cannot
// follow a lock into it.
class StopCondVar {
 public:
  // Until pred(), stop or not.
  template <typename Pred>
  void wait(Mutex& mu, Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock, std::move(pred));
    lock.release();
  }
  // Until pred() or a stop request; returns pred().
  template <typename Pred>
  bool wait(Mutex& mu, std::stop_token stop, Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool ok = cv_.wait(lock, std::move(stop), std::move(pred));
    lock.release();
    return ok;
  }
  // The same, giving up after `timeout`.
  template <typename Rep, typename Period, typename Pred>
  bool wait_for(Mutex& mu, std::stop_token stop, std::chrono::duration<Rep, Period> timeout,
                Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool ok = cv_.wait_for(lock, std::move(stop), timeout, std::move(pred));
    lock.release();
    return ok;
  }
  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

// Sleeps `d`, or less if a stop is requested first; false if it was.
template <typename Rep, typename Period>
bool sleep_unless_stopped(std::stop_token stop, std::chrono::duration<Rep, Period> d) {
  Mutex mu;
  StopCondVar cv;
  MutexLock lock(mu);
  cv.wait_for(mu, stop, d, [] { return false; });
  return !stop.stop_requested();
}

}  // namespace tierkv
