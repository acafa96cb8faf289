// ChunkReader: the flash tier's read path below its index. FlashTier looks a
// chunk up and hands its location here; the reader reads the record from
// the device, verifies it (checksum and identity) and runs the callback.
//
// * Queueing: at most queue_depth reads in flight; more wait in a FIFO.
//   Demand reads go first, and background reads (promotions nobody waits
//   for) hold at most half of the slots.
// * Verification: a record that fails its checksum or names another key,
//   chunk or version is a miss: counted, logged, and dropped from the index.
//   If a reclaim ran since the lookup, it is a plain miss (a race), not
//   corruption. Short demand reads are verified on the completion thread;
//   with io_uring, long reads while others are in flight, and every
//   background read, go to the verifier threads, demand first.
// * Page cache (buffered I/O, Options::page_cache_fd): a demand read whose
//   bytes are all cached is copied, verified and called back on the thread
//   that submitted it (preadv2 RWF_NOWAIT, which never waits for the
//   device), before submit() returns: no ring, no io-wq worker, no
//   verifier, no wake-up. Any other read goes to the engine.
// * Buffers come from the buffer pool when there is one; a FlashChunk owns
//   its buffer.
// Internal to the flash tier.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/buffer_pool.h"
#include "core/mutex.h"
#include "flash/flash_index.h"
#include "flash/flash_metrics.h"
#include "flash/flash_tier.h"
#include "flash/io_engine.h"

namespace tierkv::flash {

class ChunkReader;

// One chunk read, from its submission to its callback.
struct ChunkRead final : IoRequest {
  void on_complete(int64_t result) override;

  ChunkReader* reader = nullptr;
  std::string key;
  uint64_t key_hash = 0;
  uint32_t chunk_index = 0;
  uint64_t version = 0;
  uint64_t location = 0;
  uint64_t skew = 0;           // where the record starts in the buffer
  uint64_t reclaim_epoch = 0;  // at lookup: a reclaim since explains a mismatch
  int64_t expire_at_ms = 0;    // indexed at lookup
  uint64_t start_ns = 0;
  ReadPriority priority = ReadPriority::kDemand;
  AlignedBuffer buffer;
  FlashTier::ReadCallback done;
};

class ChunkReader {
 public:
  struct Options {
    uint32_t queue_depth = 64;
    uint32_t io_alignment = 1;  // O_DIRECT's; 1 with buffered I/O
    uint64_t region_size = 0;
    uint64_t salt = 0;  // the device's record checksum salt
    BufferPool* buffer_pool = nullptr;
    // Buffered I/O: demand reads first try the page cache of this fd on the
    // submitting thread; -1: every read goes to the engine.
    int page_cache_fd = -1;
  };
  // `reclaim_epoch` is bumped by every reclaim of the tier.
  ChunkReader(const Options& options, IoEngine& engine, FlashIndex& index, FlashMetrics& metrics,
              const std::atomic<uint64_t>& reclaim_epoch);
  // Stops the verifier threads; the owner waits for reads first (wait_idle).
  ~ChunkReader();
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;

  // A read of the chunk `found` says is at its location, found at `epoch`.
  std::unique_ptr<ChunkRead> prepare(std::string_view key, uint64_t key_hash, uint32_t chunk_index,
                                     const IndexedChunk& found, uint64_t epoch);
  // Takes the reads (each with its callback and priority; the pointers are
  // left empty), queues them and starts what the free slots allow.
  void submit(std::span<std::unique_ptr<ChunkRead>> reads);
  // Waits until no read is queued, in flight or in its callback.
  void wait_idle();

 private:
  friend struct ChunkRead;
  void on_done(ChunkRead* read, int64_t result);
  // Moves queued reads into free slots, demand reads first.
  void take_queued_locked(std::vector<IoRequest*>& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Verifies, runs the callback, frees the read.
  void complete(ChunkRead* read, int64_t result);
  Result<FlashChunk> verify(ChunkRead& read, int64_t result);
  // Copies a demand read from the page cache if it holds every byte.
  bool read_from_page_cache(ChunkRead& read);
  void run_verifier();

  const Options options_;
  IoEngine& engine_;
  FlashIndex& index_;
  FlashMetrics& metrics_;
  const std::atomic<uint64_t>& reclaim_epoch_;

  Mutex mu_;
  CondVar idle_;
  std::deque<ChunkRead*> demand_queue_ ABSL_GUARDED_BY(mu_);
  std::deque<ChunkRead*> background_queue_ ABSL_GUARDED_BY(mu_);
  uint32_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t background_in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // of in_flight_
  // queued + in flight + callback running
  uint64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;

  // Completed reads waiting for a verifier thread (io_uring only: the
  // thread-pool engine completes reads on many threads already).
  const bool offload_verify_;
  Mutex verify_mu_;
  CondVar verify_cv_;
  std::deque<std::pair<ChunkRead*, int64_t>> verify_demand_ ABSL_GUARDED_BY(verify_mu_);
  std::deque<std::pair<ChunkRead*, int64_t>> verify_background_ ABSL_GUARDED_BY(verify_mu_);
  bool verify_stop_ ABSL_GUARDED_BY(verify_mu_) = false;
  std::vector<std::thread> verifiers_;
};

}  // namespace tierkv::flash
