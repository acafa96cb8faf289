// Promoter: copies objects from flash back into memory.
//
// * Admission: each flash hit counts in a count-min sketch; an object is
//   promoted once its estimate reaches the threshold (default 2), so one-off
//   reads of cold data do not displace the memory working set.
// * In flight: at most max_inflight promotions at once (prefetch shares the
//   cap), and never two of one key.
// * Safety: a copy is installed only if memory has nothing for the key and
//   flash still holds that exact version, checked under the key's lock that
//   removals also take, so a deleted or rewritten key never comes back.
#pragma once

#include <absl/container/flat_hash_set.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "core/metrics.h"
#include "flash/flash_tier.h"
#include "memory/memory_tier.h"
#include "store/count_min.h"
#include "store/flash_reader.h"
#include "store/key_locks.h"

namespace tierkv {

struct PromoterOptions {
  int64_t threshold = 2;
  int64_t max_inflight = 64;
  int64_t lease_ttl_ms = 10000;
  size_t sketch_width = 1 << 16;
};

class Promoter {
 public:
  Promoter(memory::MemoryTier& memory, flash::FlashTier& flash, FlashReader& reader,
           KeyLocks& locks, MetricsRegistry& metrics, const PromoterOptions& options);

  void set_limits(int64_t threshold, int64_t max_inflight);
  // Length of the lease a fetch or prefetch grants from now on.
  void set_lease_ttl_ms(int64_t ms) { lease_ttl_ms_.store(ms, std::memory_order_relaxed); }
  // Counts a flash hit of the key; true if the key is now admitted.
  bool admit(uint64_t key_hash);
  // Takes an in-flight slot and a memory writer for a copy of the object.
  // Busy if at the cap or already in flight; OutOfMemory if memory cannot
  // make room without waiting.
  Result<memory::ObjectWriter> begin(std::string_view key, uint64_t size);
  // What the reader calls with the writer once the copy is filled (or not).
  FlashReader::OnCopied finisher(uint64_t version, int64_t expire_at_ms, bool lease,
                                 std::function<void(Status)> done = {});
  // Reads the whole object from flash and promotes it (admitted or not).
  // `done` (may be empty) runs once; OK if the key was not on flash.
  void promote(std::string_view key, bool lease, std::function<void(Status)> done);

 private:
  Status install(memory::ObjectWriter&& writer, uint64_t version, int64_t expire_at_ms, bool lease);
  void end(std::string_view key);

  memory::MemoryTier& memory_;
  flash::FlashTier& flash_;
  FlashReader& reader_;
  KeyLocks& locks_;
  CountMinSketch sketch_;
  std::atomic<int64_t> threshold_;
  std::atomic<int64_t> max_inflight_;
  std::atomic<int64_t> lease_ttl_ms_;
  std::mutex mu_;
  absl::flat_hash_set<std::string> inflight_;
  Counter& attempted_;
  Counter& done_;
  Counter& failed_;
  Gauge& inflight_gauge_;
};

}  // namespace tierkv
