#include "store/preheat/preheater.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <span>
#include <stop_token>
#include <thread>

#include "core/clock.h"
#include "store/preheat/piece_buffer.h"
#include "store/preheat/preheat_source.h"
#include "store/preheat/sha256.h"
#include "store/worker_pool.h"

namespace tierkv {

namespace {

constexpr uint64_t kMinPiece = uint64_t{4} << 20;
constexpr uint64_t kMaxPiece = uint64_t{64} << 20;
constexpr size_t kJobsKept = 1000;  // ended jobs are forgotten beyond this

}  // namespace

std::string_view preheat_state_name(PreheatState state) {
  switch (state) {
    case PreheatState::kQueued:
      return "queued";
    case PreheatState::kRunning:
      return "running";
    case PreheatState::kDone:
      return "done";
    case PreheatState::kFailed:
      return "failed";
    case PreheatState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

uint64_t default_piece_size(uint64_t length, uint32_t chunk_size, uint64_t max_piece) {
  const uint64_t wanted = std::bit_ceil(std::max<uint64_t>((length + 499) / 500, 1));
  const uint64_t clamped =
      std::min(std::clamp(wanted, kMinPiece, kMaxPiece), max_piece / chunk_size * chunk_size);
  // Chunk sizes are powers of two, so the larger of the two is a multiple of both.
  return std::max<uint64_t>(clamped, chunk_size);
}

struct Preheater::Job {
  uint64_t id = 0;
  PreheatRequest request;
  Mutex mu;  // everything below (Preheater::mu_ before it, if both)
  PreheatState state ABSL_GUARDED_BY(mu) = PreheatState::kQueued;
  std::string error ABSL_GUARDED_BY(mu);
  // Set by open_job() before any lane runs, read-only after, and used by
  // the lanes without mu (the source and the put take concurrent pieces):
  // not annotated.
  std::unique_ptr<PreheatSource> source;
  std::unique_ptr<StagedPut> put;
  uint64_t length = 0;
  uint64_t piece_size = 0;
  uint32_t pieces ABSL_GUARDED_BY(mu) = 0;
  uint32_t next_piece ABSL_GUARDED_BY(mu) = 0;
  uint32_t pieces_done ABSL_GUARDED_BY(mu) = 0;
  uint32_t lanes ABSL_GUARDED_BY(mu) = 0;
  uint32_t lanes_started ABSL_GUARDED_BY(mu) = 0;
  uint64_t bytes_done ABSL_GUARDED_BY(mu) = 0;
  uint64_t retries ABSL_GUARDED_BY(mu) = 0;
  bool cancel ABSL_GUARDED_BY(mu) = false;
  std::stop_source stop;  // requested with cancel: ends a source read in flight
  bool failed ABSL_GUARDED_BY(mu) = false;
  bool cached ABSL_GUARDED_BY(mu) = false;
  uint64_t cached_bytes ABSL_GUARDED_BY(mu) = 0;  // of the object, in its memory copy
  std::string fail_error ABSL_GUARDED_BY(mu);
  int64_t started_ms ABSL_GUARDED_BY(mu) = 0;
  int64_t finished_ms ABSL_GUARDED_BY(mu) = 0;
  uint64_t started_ns ABSL_GUARDED_BY(mu) = 0;
  uint64_t finished_ns ABSL_GUARDED_BY(mu) = 0;
  // The digest is taken in piece order; pieces that came early wait here.
  std::unique_ptr<Sha256> sha ABSL_GUARDED_BY(mu);
  uint32_t next_hash ABSL_GUARDED_BY(mu) = 0;
  std::map<uint32_t, PieceBuffer> early ABSL_GUARDED_BY(mu);

  uint64_t piece_offset(uint32_t piece) const { return uint64_t{piece} * piece_size; }
  uint64_t piece_length(uint32_t piece) const {
    return std::min(piece_size, length - piece_offset(piece));
  }
};

Preheater::Metrics::Metrics(MetricsRegistry& r)
    : started(r.counter("tierkv_preheat_jobs_started_total", "preheat jobs started")),
      done(r.counter("tierkv_preheat_jobs_done_total", "preheat jobs that completed")),
      failed(r.counter("tierkv_preheat_jobs_failed_total", "preheat jobs that failed")),
      cancelled(r.counter("tierkv_preheat_jobs_cancelled_total", "preheat jobs cancelled")),
      running(r.gauge("tierkv_preheat_jobs_running", "preheat jobs running")),
      queued(r.gauge("tierkv_preheat_jobs_queued", "preheat jobs waiting to run")),
      bytes_fetched(r.counter("tierkv_preheat_fetched_bytes_total", "bytes read from sources")),
      bytes_flash(
          r.counter("tierkv_preheat_flash_bytes_total", "preheated bytes written to flash")),
      bytes_memory(
          r.counter("tierkv_preheat_memory_bytes_total", "preheated bytes installed in memory")),
      source_errors(r.counter("tierkv_preheat_source_errors_total",
                              "failed reads of preheat sources (retried or not)")),
      retries(r.counter("tierkv_preheat_retries_total", "piece fetches retried")) {}

namespace {

BufferBudget::Metrics buffer_metrics(MetricsRegistry& r) {
  return {.used = r.gauge("tierkv_preheat_buffer_used_bytes", "bytes of preheat piece buffers"),
          .limit = r.gauge("tierkv_preheat_buffer_limit_bytes", "cap on them (preheat-buffer)"),
          .waits = r.counter("tierkv_preheat_buffer_waits_total",
                             "preheat pieces that waited for buffer room")};
}

}  // namespace

Preheater::Preheater(size_t workers, StartPut start_put, MetricsRegistry& metrics,
                     uint32_t chunk_size, std::function<void()> before_job)
    // Lanes queue as continuations, which the pool always takes: the queue
    // bound is the jobs' (max_jobs x pieces_inflight lanes at most).
    : pool_(std::make_unique<WorkerPool>(workers, /*max_queued=*/0, std::move(before_job))),
      start_put_(std::move(start_put)),
      metrics_(metrics),
      buffers_(int64_t{256} << 20, buffer_metrics(metrics)),
      chunk_size_(chunk_size) {}

Preheater::~Preheater() {
  stop();
  pool_->stop();
}

void Preheater::set_limits(PreheatLimits limits) {
  buffers_.set_limit(static_cast<int64_t>(std::max<uint64_t>(limits.buffer_bytes, chunk_size_)));
  MutexLock lock(mu_);
  limits_ = std::move(limits);
  schedule_locked();
}

bool Preheater::allowed(const std::string& url) const {
  MutexLock lock(mu_);
  return source_allowed(url, limits_.sources);
}

uint32_t Preheater::max_files() const {
  MutexLock lock(mu_);
  return limits_.max_files;
}

void Preheater::run_task(std::function<void(bool run)> task) {
  pool_->submit_continuation(std::move(task));
}

Result<uint64_t> Preheater::start(PreheatRequest request) {
  if (!request.sha256.empty() && !is_sha256_hex(request.sha256)) {
    return Status::invalid_argument("DIGEST must be sha256: and 64 lower-case hex digits");
  }
  auto job = std::make_shared<Job>();
  job->request = std::move(request);
  if (!job->request.sha256.empty()) {
    MutexLock job_lock(job->mu);
    job->sha = std::make_unique<Sha256>();
  }
  MutexLock lock(mu_);
  const uint64_t piece = job->request.piece_size;
  if (piece != 0 && (piece % chunk_size_ != 0 || piece > limits_.buffer_bytes)) {
    return Status::invalid_argument(
        fmt::format("PIECE must be a multiple of chunk-size ({}) up to preheat-buffer ({})",
                    chunk_size_, limits_.buffer_bytes));
  }
  if (stopping_) return Status::unavailable("the server is shutting down");
  if (!source_allowed(job->request.source, limits_.sources)) {
    return Status::invalid_argument("preheat source not allowed by preheat-sources: " +
                                    job->request.source + " (key '" + job->request.key + "')");
  }
  if (queue_.size() >= limits_.max_queued) {
    return Status::busy("preheat queue full (preheat-max-queued " +
                        std::to_string(limits_.max_queued) + " jobs waiting): try again later");
  }
  job->id = next_id_++;
  // Oldest ended first, and no job's lock held: erasing frees the job.
  while (jobs_.size() >= kJobsKept && !ended_.empty()) {
    jobs_.erase(ended_.front());
    ended_.pop_front();
  }
  jobs_[job->id] = job;
  queue_.push_back(job);
  metrics_.queued.add(1);
  schedule_locked();
  return job->id;
}

void Preheater::schedule_locked() {
  while (!stopping_ && running_ < limits_.max_jobs && !queue_.empty()) {
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    metrics_.queued.add(-1);
    ++running_;
    metrics_.running.add(1);
    metrics_.started.add();
    {
      MutexLock job_lock(job->mu);
      job->state = PreheatState::kRunning;
      job->started_ms = unix_time_ms();
      job->started_ns = mono_ns();
      // Each running job gets its share of the workers at most, so no job's
      // lanes queue behind another job's stalled ones (its cancel too).
      const auto share = static_cast<uint32_t>(pool_->workers()) / limits_.max_jobs;
      job->lanes_started = std::clamp(share, 1u, limits_.pieces_inflight);
    }
    pool_->submit_continuation([this, job](bool run) {
      if (!run) return finish(*job, PreheatState::kCancelled, "cancelled: the store is closing");
      open_job(job);
    });
  }
}

void Preheater::open_job(const std::shared_ptr<Job>& job) {
  bool cancelled = false;
  {
    MutexLock lock(job->mu);
    cancelled = job->cancel;
  }
  if (cancelled) return finish(*job, PreheatState::kCancelled, "cancelled");
  std::vector<std::string> allowed;
  {
    MutexLock lock(mu_);
    allowed = limits_.sources;
  }
  // A CANCEL (or a shutdown) ends an HTTP open that hangs.
  Result<std::unique_ptr<PreheatSource>> source =
      open_source(job->request.source, allowed, job->stop.get_token());
  if (!source && job->stop.stop_requested())
    return finish(*job, PreheatState::kCancelled, "cancelled");
  if (!source) {
    metrics_.source_errors.add();
    return finish(*job, PreheatState::kFailed, source.status().message());
  }
  const uint64_t length = (*source)->info().length;
  uint64_t max_piece = 0;
  {
    MutexLock lock(mu_);
    max_piece = limits_.buffer_bytes;
  }
  // Without a validator, pieces of two versions of the object could not be
  // told apart: the whole object comes in one request, or not at all.
  const bool one_request = (*source)->info().validator.empty();
  if (one_request && length > max_piece) {
    return finish(*job, PreheatState::kFailed,
                  fmt::format("{} gives neither ETag nor Last-Modified, so it is fetched in one "
                              "request, and its {} bytes are more than preheat-buffer ({})",
                              job->request.source, length, max_piece));
  }
  const StagedPutOptions options{.expire_at_ms = 0,  // set at publish: the TTL runs from there
                                 .cache_in_memory = job->request.cache};
  Result<std::unique_ptr<StagedPut>> put = start_put_(job->request.key, length, options);
  if (!put) return finish(*job, PreheatState::kFailed, put.status().message());
  uint32_t lanes = 0;
  {
    MutexLock lock(job->mu);
    job->source = std::move(*source);
    job->put = std::move(*put);
    job->cached = job->put->caching();
    job->cached_bytes = job->put->cached_bytes();
    job->length = length;
    job->piece_size = one_request ? std::max<uint64_t>(length, chunk_size_)
                      : job->request.piece_size
                          ? job->request.piece_size
                          : default_piece_size(length, chunk_size_, max_piece);
    job->pieces = static_cast<uint32_t>(
        std::max<uint64_t>((length + job->piece_size - 1) / job->piece_size, 1));
    lanes = std::min(job->lanes_started, job->pieces);
    job->lanes = lanes;
  }
  for (uint32_t i = 0; i < lanes; ++i) queue_lane(job);
}

// A lane runs one piece per task, then queues itself again behind whatever
// else the pool has. A pool that stops calls it with run = false: the lane
// ends, as cancelled.
void Preheater::queue_lane(const std::shared_ptr<Job>& job) {
  pool_->submit_continuation([this, job](bool run) {
    if (!run) {
      MutexLock lock(job->mu);
      job->cancel = true;
      job->stop.request_stop();
    }
    run ? run_lane(job) : lane_done(job);
  });
}

void Preheater::run_lane(const std::shared_ptr<Job>& job) {
  int64_t charge = 0;
  {
    MutexLock lock(job->mu);
    if (job->cancel || job->failed || job->next_piece >= job->pieces) {
      lock.unlock();
      return lane_done(job);
    }
    charge = static_cast<int64_t>(job->piece_size);
  }
  // Room first, then a piece: a piece once claimed never waits for room, so
  // the pieces a digest holds (they wait for an earlier one) can never hold
  // the room that earlier piece needs. A piece larger than a cap lowered
  // since the job started goes past it (it would never fit).
  if (charge > buffers_.limit()) {
    buffers_.take(charge);
  } else if (!buffers_.acquire(charge, [this, job, charge] { queue_claim(job, charge); })) {
    return;  // queue_claim runs when there is room
  }
  claim_piece(job, charge);
}

void Preheater::queue_claim(const std::shared_ptr<Job>& job, int64_t charge) {
  pool_->submit_continuation([this, job, charge](bool run) {
    if (run) return claim_piece(job, charge);
    buffers_.release(charge);
    {
      MutexLock lock(job->mu);
      job->cancel = true;
      job->stop.request_stop();
    }
    lane_done(job);
  });
}

void Preheater::claim_piece(const std::shared_ptr<Job>& job, int64_t charge) {
  uint32_t piece = 0;
  bool ended = false;
  bool too_far = false;
  {
    MutexLock lock(job->mu);
    ended = job->cancel || job->failed || job->next_piece >= job->pieces;
    // With a digest, pieces may not run far ahead of the one to hash next:
    // they wait in memory until it comes.
    too_far = !ended && job->sha && job->next_piece >= job->next_hash + 2 * job->lanes_started;
    if (!ended && !too_far) piece = job->next_piece++;
  }
  if (ended || too_far) {
    buffers_.release(charge);
    if (ended) return lane_done(job);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return queue_lane(job);
  }
  // The last piece may be short.
  buffers_.release(charge - static_cast<int64_t>(job->piece_length(piece)));
  run_piece(job, piece);
}

// Fetches and writes one piece whose bytes are charged to buffers_.
void Preheater::run_piece(const std::shared_ptr<Job>& job, uint32_t piece) {
  PieceBuffer buffer(buffers_, job->piece_length(piece));
  bool ended = false;
  {
    MutexLock lock(job->mu);
    ended = job->cancel || job->failed;
  }
  if (ended) return lane_done(job);
  Status st = fetch_piece(*job, piece, buffer.span());
  if (st.is_ok()) st = job->put->write(job->piece_offset(piece), buffer.view());
  if (!st.is_ok()) {
    {
      MutexLock lock(job->mu);
      if (!job->failed) job->fail_error = st.message();
      job->failed = true;
    }
    return lane_done(job);
  }
  const uint64_t size = buffer.view().size();
  metrics_.bytes_flash.add(size);
  bool hashing = false;
  {
    MutexLock lock(job->mu);
    ++job->pieces_done;
    job->bytes_done += size;
    hashing = job->sha != nullptr;
  }
  if (hashing) hash_in_order(*job, piece, std::move(buffer));
  queue_lane(job);
}

Status Preheater::fetch_piece(Job& job, uint32_t piece, std::span<char> out) {
  uint32_t retries = 0;
  {
    MutexLock lock(mu_);
    retries = limits_.retries;
  }
  for (uint32_t attempt = 0;; ++attempt) {
    Status st = job.source->read(job.piece_offset(piece), out, job.stop.get_token());
    if (st.is_ok()) {
      metrics_.bytes_fetched.add(out.size());
      return st;
    }
    metrics_.source_errors.add();
    // Only transport failures are worth another try: a 404, a changed
    // source or a bad request stay what they are.
    if (st.code() != StatusCode::kIOError || attempt >= retries) return st;
    metrics_.retries.add();
    {
      MutexLock lock(job.mu);
      ++job.retries;
      if (job.cancel) return Status::unavailable("cancelled");
    }
    if (!sleep_unless_stopped(job.stop.get_token(),
                              std::chrono::milliseconds(std::min(100u << attempt, 2000u))))
      return Status::unavailable("cancelled");
  }
}

void Preheater::hash_in_order(Job& job, uint32_t piece, PieceBuffer&& buffer) {
  MutexLock lock(job.mu);
  if (piece != job.next_hash) {
    job.early.emplace(piece, std::move(buffer));
    return;
  }
  job.sha->update(buffer.view());
  ++job.next_hash;
  for (auto it = job.early.find(job.next_hash); it != job.early.end();
       it = job.early.find(job.next_hash)) {
    job.sha->update(it->second.view());
    job.early.erase(it);
    ++job.next_hash;
  }
}

void Preheater::lane_done(const std::shared_ptr<Job>& job) {
  bool cancelled = false;
  std::string error;
  {
    MutexLock lock(job->mu);
    if (--job->lanes > 0) return;
    cancelled = job->cancel;
    if (job->failed) {
      error = job->fail_error;
    } else if (!cancelled && job->sha) {
      const std::string got = job->sha->hex();
      if (got != job->request.sha256) {
        error = "digest mismatch: expected sha256:" + job->request.sha256 + ", got sha256:" + got;
      }
    }
  }
  // The last lane decides; nothing else touches the job's put now.
  if (cancelled) return finish(*job, PreheatState::kCancelled, "cancelled");
  if (!error.empty()) return finish(*job, PreheatState::kFailed, error);
  if (job->request.ttl_s > 0) job->put->set_expiry(unix_time_ms() + job->request.ttl_s * 1000);
  Result<memory::WriteResult> committed = job->put->commit(job->request.exclusive);
  if (!committed) return finish(*job, PreheatState::kFailed, committed.status().message());
  {
    MutexLock lock(job->mu);
    if (job->cached) metrics_.bytes_memory.add(job->cached_bytes);
  }
  finish(*job, PreheatState::kDone, "");
}

void Preheater::finish(Job& job, PreheatState state, std::string error) {
  std::unique_ptr<StagedPut> put;
  std::unique_ptr<PreheatSource> source;
  std::map<uint32_t, PieceBuffer> early;  // their room goes back to buffers_
  if (state == PreheatState::kFailed) {
    spdlog::warn("preheat job {} of '{}' failed: {}", job.id, job.request.key, error);
  }
  {
    MutexLock lock(job.mu);
    early = std::move(job.early);
    job.state = state;
    job.error = std::move(error);
    job.finished_ms = unix_time_ms();
    job.finished_ns = mono_ns();
    if (state != PreheatState::kDone) job.cached = false;
    put = std::move(job.put);
    source = std::move(job.source);
  }
  put.reset();  // an uncommitted put leaves nothing visible
  (state == PreheatState::kDone     ? metrics_.done
   : state == PreheatState::kFailed ? metrics_.failed
                                    : metrics_.cancelled)
      .add();
  MutexLock lock(mu_);
  ended_.push_back(job.id);
  --running_;
  metrics_.running.add(-1);
  schedule_locked();
  idle_.notify_all();
}

PreheatJobStatus Preheater::status_of(const Job& job) const {
  job.mu.assert_held();
  PreheatJobStatus s;
  s.id = job.id;
  s.key = job.request.key;
  s.source = job.request.source;
  s.state = job.state;
  s.bytes_done = job.bytes_done;
  s.bytes_total = job.length;
  s.pieces_done = job.pieces_done;
  s.pieces_total = job.pieces;
  s.piece_size = job.piece_size;
  s.retries = job.retries;
  s.cached = job.cached;
  s.started_ms = job.started_ms;
  s.finished_ms = job.finished_ms;
  s.error = job.error;
  if (job.started_ns != 0) {
    const uint64_t end = job.finished_ns != 0 ? job.finished_ns : mono_ns();
    const double seconds = static_cast<double>(end - job.started_ns) / 1e9;
    s.rate_bytes_s = seconds > 0 ? static_cast<double>(job.bytes_done) / seconds : 0;
  }
  return s;
}

std::optional<PreheatJobStatus> Preheater::job(uint64_t id) const {
  std::shared_ptr<Job> job;
  {
    MutexLock lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return std::nullopt;
    job = it->second;
  }
  MutexLock lock(job->mu);
  return status_of(*job);
}

std::vector<PreheatJobStatus> Preheater::jobs(uint64_t first_id, size_t count,
                                              uint64_t* next_id) const {
  std::vector<std::shared_ptr<Job>> all;
  {
    MutexLock lock(mu_);
    auto it = jobs_.lower_bound(first_id);
    for (; it != jobs_.end() && all.size() < count; ++it) all.push_back(it->second);
    if (next_id) *next_id = it == jobs_.end() ? 0 : it->first;
  }
  std::vector<PreheatJobStatus> out;
  for (const auto& job : all) {
    MutexLock lock(job->mu);
    out.push_back(status_of(*job));
  }
  return out;
}

Status Preheater::cancel(uint64_t id) {
  MutexLock lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::not_found("no such preheat job");
  Job& job = *it->second;
  MutexLock job_lock(job.mu);
  if (job.state == PreheatState::kQueued) {
    std::erase(queue_, it->second);
    metrics_.queued.add(-1);
    metrics_.cancelled.add();
    job.state = PreheatState::kCancelled;
    job.error = "cancelled";
    job.finished_ms = unix_time_ms();
    ended_.push_back(id);
  } else if (job.state == PreheatState::kRunning) {
    job.cancel = true;
    job.stop.request_stop();
  }
  return Status::ok();
}

bool Preheater::stop(std::chrono::milliseconds timeout) {
  std::vector<uint64_t> ids;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    for (const auto& [id, job] : jobs_) ids.push_back(id);
  }
  for (uint64_t id : ids) (void)cancel(id);
  MutexLock lock(mu_);
  const bool forever = timeout == std::chrono::milliseconds::max();
  const auto deadline = forever ? std::chrono::steady_clock::time_point::max()
                                : std::chrono::steady_clock::now() + timeout;
  while (running_ != 0) {
    if (forever) {
      idle_.wait(mu_);
    } else if (!idle_.wait_until(mu_, deadline)) {
      return running_ == 0;
    }
  }
  return true;
}

}  // namespace tierkv
