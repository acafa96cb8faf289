#include "store/flashio/flash_value_sink.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "core/mutex.h"
#include "store/flashio/buffer_budget.h"
#include "store/flashio/staged_put.h"
#include "store/store.h"
#include "store/worker_pool.h"

namespace tierkv {

// What the sink's pool jobs share with it; the last of them (or the sink)
// to let go frees the staged put and the buffers.
struct FlashValueSink::Shared : std::enable_shared_from_this<Shared> {
  Shared(std::unique_ptr<StagedPut> p, Store& s, WorkerPool& pl, std::shared_ptr<BufferBudget> b,
         size_t w)
      : put(std::move(p)),
        store(s),
        pool(pl),
        budget(std::move(b)),
        window(std::max<size_t>(w, 1)) {}
  ~Shared() {
    if (budget && charged > 0) budget->release(charged);
  }

  char* take_buffer(uint32_t chunk_size);
  // The connection would have to read into a buffer the sink does not have
  // and may not make yet.
  bool needs_credit_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return budget && !holding_current && free_buffers.empty() && !credit;
  }
  bool paused_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return outstanding >= window || needs_credit_locked();
  }
  // Asks flash-write-buffer for the next buffer: true if granted at once;
  // else on_credit() runs once it is.
  bool ask_credit(uint32_t chunk_size);
  void on_credit(int64_t bytes);
  void write(uint64_t offset, char* buffer, size_t length, bool run);
  void run_commit(bool run);
  void submit_commit();
  // The commit's answer: commit_staged()'s, or OK if a later write or
  // removal of the key replaced this value while it landed.
  Result<memory::WriteResult> commit_now();
  Result<memory::WriteResult> commit_staged();

  std::unique_ptr<StagedPut> put;
  Store& store;
  WorkerPool& pool;
  const std::shared_ptr<BufferBudget> budget;  // flash-write-buffer; null: no cap
  const size_t window;

  Mutex mu;
  std::vector<std::unique_ptr<char[]>> buffers ABSL_GUARDED_BY(mu);  // every buffer made
  std::vector<char*> free_buffers ABSL_GUARDED_BY(mu);
  // the sink is filling a buffer
  bool holding_current ABSL_GUARDED_BY(mu) = false;
  // budget granted for the next new buffer
  bool credit ABSL_GUARDED_BY(mu) = false;
  // ... asked for, not granted yet
  bool credit_waiting ABSL_GUARDED_BY(mu) = false;
  int64_t charged ABSL_GUARDED_BY(mu) = 0;  // bytes taken from the budget
  // committed (or failed): takes no more budget
  bool committed ABSL_GUARDED_BY(mu) = false;
  // buffers handed to the pool, not yet written
  size_t outstanding ABSL_GUARDED_BY(mu) = 0;
  Status first_error ABSL_GUARDED_BY(mu);
  std::function<void()> on_room ABSL_GUARDED_BY(mu);
  bool commit_requested ABSL_GUARDED_BY(mu) = false;
  bool commit_started ABSL_GUARDED_BY(mu) = false;
  Commit commit;
  CommitDone done;
  ExclusiveRunner exclusive;
};

char* FlashValueSink::Shared::take_buffer(uint32_t chunk_size) {
  bool over_cap = false;
  char* b = nullptr;
  {
    MutexLock lock(mu);
    holding_current = true;
    if (!free_buffers.empty()) {
      b = free_buffers.back();
      free_buffers.pop_back();
      return b;
    }
    // Without a credit only when the parser hands over bytes it already
    // read with the command (at most its read buffer): taken over the cap.
    if (budget) {
      over_cap = !std::exchange(credit, false);
      if (over_cap) charged += chunk_size;
    }
    buffers.push_back(std::make_unique_for_overwrite<char[]>(chunk_size));
    b = buffers.back().get();
  }
  if (over_cap) budget->take(chunk_size);
  return b;
}

bool FlashValueSink::Shared::ask_credit(uint32_t chunk_size) {
  const int64_t bytes = chunk_size;
  std::weak_ptr<Shared> weak = weak_from_this();
  // The budget outlives its waiters (it runs them): a plain pointer, not a
  // share of it that a waiter queued at shutdown would keep alive.
  const bool now = budget->acquire(bytes, [weak, b = budget.get(), bytes] {
    if (auto self = weak.lock()) {
      self->on_credit(bytes);
    } else {
      b->release(bytes);
    }
  });
  if (now) {
    MutexLock lock(mu);
    charged += bytes;
    credit = true;
    credit_waiting = false;
  }
  return now;
}

void FlashValueSink::Shared::on_credit(int64_t bytes) {
  std::function<void()> room;
  bool late = false;
  {
    MutexLock lock(mu);
    credit_waiting = false;
    late = committed;
    if (!late) {
      charged += bytes;
      credit = true;
      if (on_room && !paused_locked()) room = std::move(on_room);
    }
  }
  // Granted after the value committed (the request was still queued): the
  // room goes straight back, not held until this sink is destroyed.
  if (late) return budget->release(bytes);
  if (room) room();
}

void FlashValueSink::Shared::write(uint64_t offset, char* buffer, size_t length, bool run) {
  Status st = run ? Status::ok() : Status::unavailable("the server is shutting down");
  bool failed_before = false;
  {
    MutexLock lock(mu);
    failed_before = !first_error.is_ok();
  }
  // After a failure the rest of the value is only drained.
  if (run && !failed_before) st = put->write(offset, std::string_view(buffer, length));
  std::function<void()> room;
  bool commit_next = false;
  {
    MutexLock lock(mu);
    if (!st.is_ok() && first_error.is_ok()) first_error = st;
    free_buffers.push_back(buffer);
    --outstanding;
    if (on_room && !paused_locked()) room = std::move(on_room);
    if (outstanding == 0 && commit_requested && !commit_started) {
      commit_started = true;
      commit_next = true;
    }
  }
  if (room) room();
  if (commit_next) submit_commit();
}

void FlashValueSink::Shared::submit_commit() {
  // Runs after the last write finished, never waiting for one in a worker
  // (that could hold every worker while the writes queue behind them).
  pool.submit_continuation([self = shared_from_this()](bool run) { self->run_commit(run); });
}

void FlashValueSink::Shared::run_commit(bool run) {
  Result<memory::WriteResult> r =
      run ? commit_now()
          : Result<memory::WriteResult>(Status::unavailable("the server is shutting down"));
  CommitDone finished;
  {
    MutexLock lock(mu);
    finished = std::move(done);
  }
  // Let go of the staged chunks and the buffers (every write is done)
  // before the caller hears back: a failed or refused put leaves nothing
  // behind it, and the next value may use the room at once.
  put.reset();
  int64_t release = 0;
  std::vector<std::unique_ptr<char[]>> gone;
  {
    MutexLock lock(mu);
    free_buffers.clear();
    gone.swap(buffers);
    release = std::exchange(charged, 0);
    credit = false;
    committed = true;
  }
  gone.clear();
  if (budget && release > 0) budget->release(release);
  finished(std::move(r));
}

Result<memory::WriteResult> FlashValueSink::Shared::commit_now() {
  Result<memory::WriteResult> r = commit_staged();
  if (r || r.status().code() != StatusCode::kConflict) return r;
  // A write of the key that began after this one's value did won, or a
  // removal came while it landed (a body chunk's landing can be the one to
  // find out): this SET took effect first and was replaced, as a SET that a
  // later one overwrites. The winner may still be in flight itself (the key
  // then reads as absent for a moment), so the flash tier's word counts
  // too. A chunk lost to reclaim or a failed write is neither: that stays
  // an error, never a silent OK.
  std::optional<memory::ObjectInfo> after = store.stat(put->key());
  if (put->superseded() || (after && after->version > put->version())) {
    return memory::WriteResult{.written = true, .version = put->version(), .previous = {}};
  }
  return r;
}

Result<memory::WriteResult> FlashValueSink::Shared::commit_staged() {
  {
    MutexLock lock(mu);
    if (!first_error.is_ok()) return first_error;
  }
  TIERKV_RETURN_IF_ERROR(put->await_body());
  // NX / XX and KEEPTTL look at both tiers with no command running, just
  // before the last chunk goes out; the staged commit itself refuses to
  // replace a newer version.
  Result<memory::WriteResult> r = memory::WriteResult{};
  Status ran = StagedPut::run_exclusive(exclusive, [&] {
    std::optional<memory::ObjectInfo> now = store.stat(put->key());
    bool holds = commit.condition == memory::WriteCondition::kAlways ||
                 (commit.condition == memory::WriteCondition::kIfAbsent) == !now;
    if (!holds) {
      r = memory::WriteResult{};
      return false;
    }
    put->set_expiry(commit.keep_ttl && now ? now->expire_at_ms : commit.expire_at_ms);
    Status queued = put->try_write_last();
    if (queued.code() == StatusCode::kBusy) return true;
    r = queued.is_ok() ? put->await_last() : Result<memory::WriteResult>(queued);
    return false;
  });
  if (!ran.is_ok()) return ran;
  return r;
}

FlashValueSink::FlashValueSink(std::unique_ptr<StagedPut> put, Store& store, WorkerPool& pool,
                               std::shared_ptr<BufferBudget> budget, size_t window)
    : size_(put->size()),
      chunk_size_(put->chunk_size()),
      shared_(std::make_shared<Shared>(std::move(put), store, pool, std::move(budget), window)) {}

FlashValueSink::~FlashValueSink() {
  // An unfinished value: jobs still running hold the shared state; the
  // staged put goes with the last of them.
  MutexLock lock(shared_->mu);
  shared_->on_room = nullptr;
}

std::pair<char*, size_t> FlashValueSink::next_writable() {
  if (filled_ >= size_) return {nullptr, 0};
  if (current_ == nullptr) {
    current_ = shared_->take_buffer(chunk_size_);
    current_offset_ = filled_;
  }
  const uint64_t end = std::min<uint64_t>(current_offset_ + chunk_size_, size_);
  return {current_ + (filled_ - current_offset_), static_cast<size_t>(end - filled_)};
}

void FlashValueSink::advance(size_t n) {
  filled_ += n;
  const uint64_t end = std::min<uint64_t>(current_offset_ + chunk_size_, size_);
  if (filled_ == end) submit_current();
}

void FlashValueSink::submit_current() {
  char* buffer = std::exchange(current_, nullptr);
  const uint64_t offset = current_offset_;
  const size_t length = static_cast<size_t>(filled_ - offset);
  {
    MutexLock lock(shared_->mu);
    ++shared_->outstanding;
    shared_->holding_current = false;
  }
  // Always taken: the window bounds what one connection queues.
  shared_->pool.submit_continuation(
      [s = shared_, offset, buffer, length](bool run) { s->write(offset, buffer, length, run); });
}

uint64_t FlashValueSink::buffered_bytes() const {
  MutexLock lock(shared_->mu);
  return shared_->outstanding * chunk_size_ + (current_ ? filled_ - current_offset_ : 0);
}

bool FlashValueSink::paused() const {
  {
    MutexLock lock(shared_->mu);
    if (shared_->outstanding >= shared_->window) return true;
    if (!shared_->needs_credit_locked() || filled_ >= size_) return false;
    if (shared_->credit_waiting) return true;
    shared_->credit_waiting = true;
  }
  return !shared_->ask_credit(chunk_size_);
}

void FlashValueSink::when_room(std::function<void()> fn) {
  {
    MutexLock lock(shared_->mu);
    if (shared_->paused_locked()) {
      shared_->on_room = std::move(fn);
      return;
    }
  }
  fn();
}

void FlashValueSink::finish(const Commit& commit, CommitDone done, ExclusiveRunner exclusive) {
  if (filled_ < size_) {
    done(Status::invalid_argument("flash value: finished before the value was whole"));
    return;
  }
  bool now = false;
  {
    MutexLock lock(shared_->mu);
    shared_->commit = commit;
    shared_->done = std::move(done);
    shared_->exclusive = std::move(exclusive);
    shared_->commit_requested = true;
    if (shared_->outstanding == 0 && !shared_->commit_started) {
      shared_->commit_started = true;
      now = true;
    }
  }
  if (now) shared_->submit_commit();
}

}  // namespace tierkv
