// What every StreamReader of a store shares: the store, the memory tier
// whose use-once lane look-ahead is charged to, the defaults, the metrics,
// and the flash read latency the automatic depth plans for. Internal to
// the store.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "core/config.h"
#include "core/metrics.h"
#include "memory/memory_tier.h"

namespace tierkv {

class WorkerPool;
class Store;

struct StreamMetrics {
  explicit StreamMetrics(MetricsRegistry& r);
  Counter& issued;  // look-ahead reads started
  Counter& hits;    // values that had arrived when the consumer came
  Counter& late;    // values the consumer waited for
  Counter& wasted;  // values read ahead, dropped unread
  Gauge& open;      // streams open now
  // Refreshed from the memory tier by the store's collector.
  Gauge& useonce_dropped;  // use-once chunks dropped once served
  Gauge& lane_bytes;       // look-ahead bytes charged to the use-once lane
  // Readahead of sequential ranged reads (readahead.h).
  Counter& ra_sequences;  // sequences detected
  Counter& ra_issued;     // chunk reads started
  Counter& ra_hits;       // reads served from arrived readahead
  Counter& ra_late;       // reads served from readahead that waited
  Counter& ra_wasted;     // chunks dropped unread
};

struct StreamContext {
  StreamContext(Store& s, memory::MemoryTier& m, MetricsRegistry& r, const Config& config);

  // The device read latency L that an automatic depth plans for: the
  // median of the flash chunk read latency histogram, or 100 us before
  // anything was measured.
  uint64_t latency_estimate_ns() const;
  void set_defaults(const Config& config);

  Store& store;
  memory::MemoryTier& memory;
  StreamMetrics metrics;
  std::atomic<Histogram*> read_latency{nullptr};  // set once flash is open
  std::atomic<int32_t> depth;                     // stream-depth (0: automatic)
  std::atomic<uint32_t> channels;                 // stream-channels
  std::atomic<bool> readahead;                    // readahead
  std::atomic<uint32_t> readahead_max_chunks;     // readahead-max-chunks
  // The store is closing: no look-ahead read starts any more (completions
  // of reads in flight would otherwise start new ones while the flash tier
  // is being torn down).
  std::atomic<bool> closing{false};
  // Where a consumer's take hands the start of the next look-ahead read
  // (set once flash is open): starting a read costs a submission system
  // call and a wake-up of the device or of the kernel's I/O worker, 10-20
  // us on a VM, which the consumer would otherwise pay on every take.
  std::atomic<WorkerPool*> pool{nullptr};

  // Runs `pump` on a store worker, once per `queued` (the caller's flag: a
  // pump already queued for it is enough, so a fast consumer does not fill
  // the pool's queue, which promotions and copies share). False (and
  // `pump` is not run) if there is no pool or it refused the job: the
  // caller pumps itself.
  bool pump_on_worker(std::atomic<bool>& queued, std::function<void()> pump) const;
};

}  // namespace tierkv
