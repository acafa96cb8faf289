// Preheater: jobs that load a file or an HTTP object into the store, to
// flash and (CACHE yes) memory in one pass, with progress.
//
// A job fetches its source in pieces (default: length / 500 rounded up to
// a power of two, clamped to [4 MiB, 64 MiB] and to preheat-buffer, a
// multiple of the chunk size) and writes each piece through one StagedPut:
// the object appears only when every piece landed and the digest, if one
// was given, matched. A job that fails or is cancelled leaves the key's
// previous value.
//
// Every piece's buffer is charged to one budget (preheat-buffer) from its
// fetch until it is written (with a digest: until it is hashed, pieces
// hash in order). A lane takes room for a piece before it claims the
// piece, waiting without a thread while there is none; so a claimed piece
// never waits for room that later pieces (waiting for it to be hashed)
// hold.
//
// Everything runs on the preheater's own pool (preheat-workers threads),
// never on the store's promotion pool: a source that trickles bytes holds
// only preheat workers, and promotions, prefetches and the fetches of
// EXEC and APPEND keep theirs. A job's first task opens the source, then up
// to preheat-pieces-inflight "lanes" each fetch one piece, write it, and
// queue themselves again, so the jobs running interleave their pieces. At
// most preheat-max-jobs jobs run; the rest wait in order.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/metrics.h"
#include "core/mutex.h"
#include "core/status.h"
#include "store/flashio/buffer_budget.h"
#include "store/flashio/staged_put.h"
#include "store/preheat/preheat_types.h"

namespace tierkv {

class PieceBuffer;
class WorkerPool;

struct PreheatLimits {
  std::vector<std::string> sources;  // allowlist of URL prefixes
  uint32_t max_jobs = 2;
  uint32_t pieces_inflight = 4;
  uint32_t retries = 3;
  uint32_t max_queued = 1024;  // jobs waiting to run; more are refused (Busy)
  // Cap on the bytes of all jobs' piece buffers; PIECE may not exceed it.
  uint64_t buffer_bytes = uint64_t{256} << 20;
  uint32_t max_files = 10000;  // files one TIER.PREHEAT PREFIX may start
};

// Piece size by the default rule, for an object of `length` bytes, at most
// `max_piece` (rounded down to whole chunks, at least one chunk).
uint64_t default_piece_size(uint64_t length, uint32_t chunk_size, uint64_t max_piece = UINT64_MAX);

class Preheater {
 public:
  using StartPut = std::function<Result<std::unique_ptr<StagedPut>>(
      const std::string& key, uint64_t size, const StagedPutOptions& options)>;

  // `before_job` (tests) runs on a preheat worker before each task it takes.
  Preheater(size_t workers, StartPut start_put, MetricsRegistry& metrics, uint32_t chunk_size,
            std::function<void()> before_job = {});
  // Cancels every job, waits for its tasks, and stops the pool.
  ~Preheater();
  Preheater(const Preheater&) = delete;
  Preheater& operator=(const Preheater&) = delete;

  void set_limits(PreheatLimits limits);
  // True if preheat-sources allows `url`.
  bool allowed(const std::string& url) const;
  uint32_t max_files() const;
  // Runs `task` on a preheat worker (run = true), or with run = false once
  // the preheater stops: work that must not run on a network thread.
  void run_task(std::function<void(bool run)> task);
  // Queues a job; never blocks (the source is opened on the pool). Errors:
  // a source outside the allowlist, a malformed digest, a bad piece size.
  Result<uint64_t> start(PreheatRequest request);
  std::optional<PreheatJobStatus> job(uint64_t id) const;
  // Up to `count` jobs with ids from `first_id` up, in id order (oldest
  // first); `next_id` becomes the id to continue from, 0 if none is left.
  std::vector<PreheatJobStatus> jobs(uint64_t first_id = 0, size_t count = SIZE_MAX,
                                     uint64_t* next_id = nullptr) const;
  // NotFound for an unknown id; OK (no change) for a job that already ended.
  Status cancel(uint64_t id);
  // Cancels every job and waits until none runs, or at most `timeout`;
  // later start() fails. False if a job still runs (a worker is stuck in a
  // source that ignores the cancel).
  bool stop(std::chrono::milliseconds timeout = std::chrono::milliseconds::max());

 private:
  struct Job;
  struct Metrics {
    explicit Metrics(MetricsRegistry& r);
    Counter& started;
    Counter& done;
    Counter& failed;
    Counter& cancelled;
    Gauge& running;
    Gauge& queued;
    Counter& bytes_fetched;
    Counter& bytes_flash;
    Counter& bytes_memory;
    Counter& source_errors;
    Counter& retries;
  };

  void schedule_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void open_job(const std::shared_ptr<Job>& job);
  void queue_lane(const std::shared_ptr<Job>& job);
  void run_lane(const std::shared_ptr<Job>& job);
  void queue_claim(const std::shared_ptr<Job>& job, int64_t charge);
  // With one piece's room (`charge`) in hand: takes the next piece, or ends.
  void claim_piece(const std::shared_ptr<Job>& job, int64_t charge);
  void run_piece(const std::shared_ptr<Job>& job, uint32_t piece);
  Status fetch_piece(Job& job, uint32_t piece, std::span<char> out);
  void hash_in_order(Job& job, uint32_t piece, PieceBuffer&& buffer);
  void lane_done(const std::shared_ptr<Job>& job);
  void finish(Job& job, PreheatState state, std::string error);
  // Needs job.mu (not said with REQUIRES: Job is incomplete here).
  PreheatJobStatus status_of(const Job& job) const;

  std::unique_ptr<WorkerPool> pool_;
  StartPut start_put_;
  Metrics metrics_;
  BufferBudget buffers_;  // preheat-buffer
  const uint32_t chunk_size_;
  mutable Mutex mu_;
  CondVar idle_;
  PreheatLimits limits_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t running_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  // every job, by id (bounded: oldest ended go)
  std::map<uint64_t, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  // ids of the jobs in jobs_ that ended, oldest first
  std::deque<uint64_t> ended_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tierkv
