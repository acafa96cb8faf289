// ExecGate: what makes EXEC (and MSET, MSETNX, RENAME, COPY) isolated.
//
// Every command handler runs while holding a gate. An ordinary command holds
// its I/O thread's own slot: one uncontended mutex on a cache line that no
// other thread writes, so the cost is two atomic operations per command and
// no sharing between threads. A command that must look atomic to every other
// client (flag kExclusive) holds all slots, taken in index order: while it
// runs, no other command runs on any I/O thread, as in Redis, where one
// thread runs everything.
//
// Deadlock-free because an ordinary command holds exactly one slot and never
// asks for another, and an exclusive one asks for all slots in one fixed
// order while holding none. An exclusive command never waits for flash
// under the gate: its flash-only values are fetched into memory before it
// runs (the connection's fetch-and-rerun, see connection_deferred.cc), so it
// holds the other threads only for in-memory work. The one wait for flash
// under the gate is a store worker's (runner()): the last chunk of a large
// SET, a preheat or a flash-to-flash copy, one chunk write, so that such a
// value lands between two commands.
//
// Why not per-key stripe locks: every command would hash its keys a second
// time and lock them in sorted order, FLUSHALL, SCAN and KEYS would need
// every stripe, and the table of keys per command would have to be exact
// for every command. A slot per thread costs less per ordinary command and
// is trivially complete; what it costs is that an exclusive command also
// stalls clients of unrelated keys for its (short, memory-only) duration.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "store/exclusive_runner.h"

namespace tierkv::server {

class ExecGate : public std::enable_shared_from_this<ExecGate> {
 public:
  explicit ExecGate(size_t slots = 1) { resize(slots); }
  ExecGate(const ExecGate&) = delete;
  ExecGate& operator=(const ExecGate&) = delete;

  // Only before any command runs (Server::start, before the threads).
  void resize(size_t slots) {
    slots_.clear();
    for (size_t i = 0; i < (slots == 0 ? 1 : slots); ++i)
      slots_.push_back(std::make_unique<Slot>());
  }
  size_t slots() const { return slots_.size(); }

  // Holds one slot (an ordinary command on I/O thread `slot`) or all of
  // them (an exclusive command), released when it goes out of scope.
  class Guard {
   public:
    Guard() = default;
    Guard(Guard&& o) noexcept : gate_(o.gate_), slot_(o.slot_) { o.gate_ = nullptr; }
    Guard& operator=(Guard&&) = delete;
    Guard(const Guard&) = delete;
    ~Guard() { release(); }
    // One slot or all of them, chosen at run time: a set of locks the
    // analysis cannot name (the slots guard no member, only command order).
    void release() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (gate_ == nullptr) return;
      if (slot_ == kAll) {
        for (size_t i = gate_->slots_.size(); i-- > 0;) gate_->slots_[i]->mu.unlock();
      } else {
        gate_->slots_[slot_]->mu.unlock();
      }
      gate_ = nullptr;
    }

   private:
    friend class ExecGate;
    static constexpr size_t kAll = ~size_t{0};
    Guard(ExecGate* gate, size_t slot) : gate_(gate), slot_(slot) {}
    ExecGate* gate_ = nullptr;
    size_t slot_ = 0;
  };

  Guard shared(size_t slot) {
    slot %= slots_.size();
    lock_slot(*slots_[slot]);
    return Guard(this, slot);
  }
  Guard exclusive() {
    for (auto& s : slots_) lock_slot(*s);
    return Guard(this, Guard::kAll);
  }
  // exclusive() for a store worker, which holds no slot, so the lock order
  // argument above holds (the end of a large SET, a flash copy, a preheat).
  // It keeps the gate alive: a preheat job may end after the server. Only
  // for a gate owned by a shared_ptr.
  ExclusiveRunner runner() {
    return [self = shared_from_this()](absl::FunctionRef<void()> fn) {
      Guard all = self->exclusive();
      fn();
      return Status::ok();
    };
  }

 private:
  // One cache line each, so threads never share the line they lock.
  struct alignas(64) Slot {
    Mutex mu;
  };
  // A slot is held for one command's in-memory work (microseconds), so a
  // short spin usually outlasts the holder; sleeping in the kernel at once
  // made every EXEC that met another thread's command pay a futex sleep and
  // wake-up (MULTI/EXEC -P32 with two I/O threads ran at 0.65-0.7 of one).
  static void lock_slot(Slot& s) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // released by a Guard
    for (int i = 0; i < kSpins; ++i) {
      if (s.mu.try_lock()) return;
      __builtin_ia32_pause();
    }
    s.mu.lock();
  }
  static constexpr int kSpins = 200;

  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace tierkv::server
