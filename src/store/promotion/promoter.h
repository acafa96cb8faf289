// The promotion machinery: copies objects from flash back into memory. One
// machinery for every trigger (promotion-on-hit, prefetch, demand kick,
// fetch), so a key never has two promotions and one cap covers them all.
//
// * Admission: each flash hit counts in a count-min sketch; an object is
//   promoted on a hit once its estimate reaches the threshold (default 2),
//   so one-off reads of cold data do not displace the memory working set.
// * In-flight registry: at most max_inflight promotions at once, and never
//   two of one key (InflightRegistry; a slot is an RAII value).
// * Installer: a copy is installed only if memory has nothing for the key
//   and flash still holds that exact version, checked under the key's lock
//   that removals also take, so a deleted or rewritten key never comes back.
//
// Jobs run on the store's WorkerPool: a worker re-checks residency (no
// side effects), reserves memory (clean-only for speculative triggers),
// starts the flash read, and the install runs on a worker again once the
// read completes. A whole-object GET that is admitted copies the chunks as
// they stream by instead (begin_copy), so it costs no second read.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/metrics.h"
#include "core/mutex.h"
#include "flash/flash_tier.h"
#include "memory/memory_tier.h"
#include "store/flashio/flash_reader.h"
#include "store/key_locks.h"
#include "store/promotion/count_min.h"
#include "store/worker_pool.h"

namespace tierkv {

enum class PromotionTrigger : uint8_t { kHit, kPrefetch, kKick, kFetch };

enum class PromotionOutcome : uint8_t {
  kPromoted,   // installed in memory
  kInMemory,   // memory held the key already (re-check, or at install)
  kGone,       // not on flash any more (deleted, rewritten, expired, reclaimed)
  kSaturated,  // no room (for clean-only requests: nothing clean to drop)
  kIoError,    // the flash read failed
  kBusy,       // at the in-flight cap, key already in flight, or queue full
  kDropped,    // the request's still_wanted() said no (a cooldown began)
  kCancelled,  // the store is closing
};

struct PromotionRequest {
  PromotionTrigger trigger = PromotionTrigger::kHit;
  // Lease the copy for lease-ttl-ms (fetch: for the command about to run;
  // prefetch: until its first read).
  bool lease = false;
  // Make room only from free memory or clean, unleased, unpinned objects.
  bool clean_only = false;
  // Asked on the worker just before memory is reserved; false drops the job.
  std::function<bool()> still_wanted;
  // Runs at the install if a read of the key came while the job ran, with
  // when the first one came (mono_ns) and whether it was served by the
  // job's read (attached) rather than reading flash itself.
  std::function<void(uint64_t read_at_ns, bool served)> on_early_read;
};

// Runs once per request, on a pool worker (or at once for kBusy/kCancelled).
// `bytes` is the object's size when promoted.
using PromotionDone = std::function<void(PromotionOutcome, uint64_t bytes)>;

// One promotion in flight (promoter.cc).
struct PromotionJob;

// Per-key deduplication and the shared cap of promotions in flight.
class InflightRegistry {
 public:
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), key_(std::move(o.key_)) {}
    Slot& operator=(Slot&& o) noexcept;
    ~Slot() { release(); }
    void release();
    const std::string& key() const { return key_; }

   private:
    friend class InflightRegistry;
    Slot(InflightRegistry* owner, std::string key) : owner_(owner), key_(std::move(key)) {}
    InflightRegistry* owner_ = nullptr;
    std::string key_;
  };

  InflightRegistry(int64_t cap, Gauge& gauge) : cap_(cap), gauge_(gauge) {}
  // A slot for the key, or nothing if the key is in flight or at the cap.
  // Others may wait for an `attachable` slot to be released (when_settled).
  std::optional<Slot> acquire(std::string_view key, bool attachable = true);
  void set_cap(int64_t cap) { cap_.store(cap); }
  // Runs `settled` (on the releasing thread) once the key's promotion ends,
  // installed or not. False, and `settled` is dropped, if no attachable
  // promotion of the key is in flight.
  bool when_settled(std::string_view key, std::function<void()> settled);
  // The job that holds the key's slot, for reads that attach to it.
  void set_job(std::string_view key, std::weak_ptr<PromotionJob> job);
  std::shared_ptr<PromotionJob> job(std::string_view key) const;
  size_t size() const;

 private:
  struct InFlight {
    bool attachable = true;
    std::vector<std::function<void()>> waiters;
    std::weak_ptr<PromotionJob> job;
  };
  void release(const std::string& key);

  std::atomic<int64_t> cap_;
  Gauge& gauge_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, InFlight> keys_ ABSL_GUARDED_BY(mu_);
};

struct PromoterOptions {
  int64_t threshold = 2;
  bool on_hit = true;  // promotion-on-hit
  int64_t max_inflight = 64;
  // Bytes of the objects being promoted at once: promotions share the
  // device and the pool with demand reads. One object larger than this may
  // still go when nothing else is in flight.
  int64_t max_inflight_bytes = int64_t{16} << 20;
  int64_t lease_ttl_ms = 10000;
  size_t sketch_width = 1 << 16;
};

class Promoter {
 public:
  Promoter(memory::MemoryTier& memory, flash::FlashTier& flash, FlashReader& reader,
           KeyLocks& locks, WorkerPool& pool, MetricsRegistry& metrics,
           const PromoterOptions& options);

  void set_limits(int64_t threshold, int64_t max_inflight, int64_t max_inflight_bytes);
  void set_on_hit(bool on) { on_hit_.store(on); }
  void set_lease_ttl_ms(int64_t ms) { lease_ttl_ms_.store(ms, std::memory_order_relaxed); }
  // Counts a flash hit of the key; true if promotion-on-hit admits it now.
  bool admit(uint64_t key_hash);
  // Promotes the key's flash copy in the background; `done` runs once.
  void promote(std::string_view key, PromotionRequest request, PromotionDone done = {});

  // For a whole-object flash read that copies as it goes: a writer to fill
  // and the handler the reader calls with it. Nothing if the key is busy or
  // memory has no room now (then `done` has run). On the caller's thread;
  // never waits.
  struct Copy {
    memory::ObjectWriter writer;
    FlashReader::OnCopied on_copied;
  };
  std::optional<Copy> begin_copy(std::string_view key, const flash::FlashObjectSummary& info,
                                 PromotionRequest request, PromotionDone done = {});

  // One read, two consumers: a read of [offset, offset + length) of
  // `version` of a key whose promotion is in flight is served from the
  // promotion's read (FlashReader::follow) instead of reading flash again:
  // the chunks read already at once, the rest as they arrive. A promotion
  // still queued is taken over and started now, on the caller's thread. A
  // prefetch that a read came for while it ran is installed without a lease
  // (that read was its first), and counts as served if the read attached.
  // Null, and `callbacks`
  // untouched, if there is no such promotion (or it reads another version,
  // or it ended): the caller reads flash itself.
  std::shared_ptr<FlashRead> attach(std::string_view key, uint64_t version, uint64_t offset,
                                    uint64_t length, FlashReadCallbacks& callbacks);

  // See InflightRegistry::when_settled. A copy that rides a client's GET
  // (begin_copy) goes at that client's pace: nobody waits for it.
  bool when_settled(std::string_view key, std::function<void()> settled) {
    return registry_.when_settled(key, std::move(settled));
  }

  struct Counts {
    uint64_t attempted = 0;
    uint64_t done = 0;
    uint64_t failed = 0;
  };
  Counts counts() const { return {attempted_.value(), done_.value(), failed_.value()}; }

 private:
  using Job = PromotionJob;
  std::shared_ptr<Job> make_job(std::string_view key, PromotionRequest request, PromotionDone done,
                                bool attachable = true);
  void start(const std::shared_ptr<Job>& job);
  // Reserves memory for the copy under the request's scope.
  Result<memory::ObjectWriter> reserve(const Job& job, uint64_t size);
  FlashReader::OnCopied on_copied(std::shared_ptr<Job> job, uint64_t version, int64_t expire_at_ms);
  PromotionOutcome install(Job& job, memory::ObjectWriter&& writer, uint64_t version,
                           int64_t expire_at_ms);
  void finish(Job& job, PromotionOutcome outcome);
  // Charges `size` to the bytes in flight for the job; false (nothing
  // charged) if that would pass max_inflight_bytes with others in flight.
  bool charge_bytes(Job& job, uint64_t size);

  memory::MemoryTier& memory_;
  flash::FlashTier& flash_;
  FlashReader& reader_;
  KeyLocks& locks_;
  WorkerPool& pool_;
  CountMinSketch sketch_;
  std::atomic<int64_t> threshold_;
  std::atomic<bool> on_hit_;
  std::atomic<int64_t> lease_ttl_ms_;
  std::atomic<int64_t> max_inflight_bytes_;
  std::atomic<int64_t> inflight_bytes_{0};
  InflightRegistry registry_;
  Gauge& inflight_bytes_gauge_;
  Counter& attempted_;
  Counter& done_;
  Counter& failed_;
};

}  // namespace tierkv
