// ClientPause: the state of CLIENT PAUSE, read by every command.
//
// One atomic word holds the end of the pause (steady-clock ms) and its mode,
// so a reader never sees the end of one pause with the mode of another, and
// the check a command pays while nothing is paused is one relaxed load. A
// held command does not block its I/O thread: the connection stops reading
// and waits on a timer until the end (or CLIENT UNPAUSE wakes it), then
// runs it (see Connection::wait_for_unpause).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace tierkv::server {

class ClientPause {
 public:
  enum class Mode : uint8_t { kNone = 0, kWrite = 1, kAll = 2 };

  static int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // As Redis's pauseClients: the mode replaces the one in force, and the
  // end is the later of the two.
  void pause(int64_t end_ms, Mode mode) {
    uint64_t old = word_.load(std::memory_order_relaxed);
    uint64_t next;
    do {
      next = pack(std::max(end_of(old), end_ms), mode);
    } while (!word_.compare_exchange_weak(old, next, std::memory_order_relaxed));
  }
  void unpause() { word_.store(0, std::memory_order_relaxed); }
  // False while no pause was set since the last UNPAUSE: the hot path.
  bool active() const { return word_.load(std::memory_order_relaxed) != 0; }

  // The end of the pause that holds a command (writes: it changes data), or
  // 0 if it runs now.
  int64_t holds_until(bool writes) const {
    uint64_t w = word_.load(std::memory_order_relaxed);
    if (w == 0) return 0;
    Mode mode = static_cast<Mode>(w & 3);
    if (mode == Mode::kNone || (mode == Mode::kWrite && !writes)) return 0;
    int64_t end = end_of(w);
    return end > now_ms() ? end : 0;
  }

 private:
  static uint64_t pack(int64_t end_ms, Mode mode) {
    return (static_cast<uint64_t>(std::max<int64_t>(end_ms, 0)) << 2) | static_cast<uint64_t>(mode);
  }
  static int64_t end_of(uint64_t w) { return static_cast<int64_t>(w >> 2); }

  std::atomic<uint64_t> word_{0};
};

}  // namespace tierkv::server
