#include "store/promotion/promoter.h"

#include <spdlog/spdlog.h>

#include "core/clock.h"
#include "core/hash.h"

namespace tierkv {
namespace {

// Debian's abseil has its own string_view type.
absl::string_view absl_view(std::string_view s) {
  return {s.data(), s.size()};
}

}  // namespace

// --- InflightRegistry ---

InflightRegistry::Slot& InflightRegistry::Slot::operator=(Slot&& o) noexcept {
  if (this != &o) {
    release();
    owner_ = std::exchange(o.owner_, nullptr);
    key_ = std::move(o.key_);
  }
  return *this;
}

void InflightRegistry::Slot::release() {
  if (owner_) std::exchange(owner_, nullptr)->release(key_);
}

std::optional<InflightRegistry::Slot> InflightRegistry::acquire(std::string_view key,
                                                                bool attachable) {
  MutexLock lock(mu_);
  if (static_cast<int64_t>(keys_.size()) >= cap_.load()) return std::nullopt;
  if (!keys_
           .try_emplace(absl_view(key),
                        InFlight{.attachable = attachable, .waiters = {}, .job = {}})
           .second)
    return std::nullopt;
  gauge_.add(1);
  return Slot(this, std::string(key));
}

bool InflightRegistry::when_settled(std::string_view key, std::function<void()> settled) {
  MutexLock lock(mu_);
  auto it = keys_.find(absl_view(key));
  if (it == keys_.end() || !it->second.attachable) return false;
  it->second.waiters.push_back(std::move(settled));
  return true;
}

void InflightRegistry::set_job(std::string_view key, std::weak_ptr<PromotionJob> job) {
  MutexLock lock(mu_);
  auto it = keys_.find(absl_view(key));
  if (it != keys_.end()) it->second.job = std::move(job);
}

std::shared_ptr<PromotionJob> InflightRegistry::job(std::string_view key) const {
  MutexLock lock(mu_);
  auto it = keys_.find(absl_view(key));
  return it == keys_.end() ? nullptr : it->second.job.lock();
}

size_t InflightRegistry::size() const {
  MutexLock lock(mu_);
  return keys_.size();
}

void InflightRegistry::release(const std::string& key) {
  std::vector<std::function<void()>> waiters;
  {
    MutexLock lock(mu_);
    auto it = keys_.find(key);
    if (it == keys_.end()) return;
    waiters = std::move(it->second.waiters);
    keys_.erase(it);
    gauge_.add(-1);
  }
  for (auto& settled : waiters) settled();
}

// --- Promoter ---

struct PromotionJob {
  InflightRegistry::Slot slot;
  PromotionRequest request;
  PromotionDone done;
  uint64_t bytes = 0;
  bool finished = false;
  int64_t charged = 0;  // bytes counted in Promoter::inflight_bytes_
  // What reads that attach need.
  Mutex mu;
  // by a pool worker, or taken over by a read
  bool started ABSL_GUARDED_BY(mu) = false;
  // start() has published `read` and `version`, or ended the job: a read
  // that attaches while a worker is inside start() waits for this (start
  // never blocks, so the wait is short).
  bool launched ABSL_GUARDED_BY(mu) = false;
  CondVar launched_cv;
  // The flash read filling the copy. Weak: the read holds the job (its
  // on_copied), and a strong pointer back would keep both alive for good.
  std::weak_ptr<FlashRead> read ABSL_GUARDED_BY(mu);
  uint64_t version ABSL_GUARDED_BY(mu) = 0;  // the version it reads
  // Reads of the key that came while the job ran: the first read a lease
  // would wait for has come, so the install grants none.
  uint32_t reads ABSL_GUARDED_BY(mu) = 0;
  // of those, the ones served by this job's read
  uint32_t attached ABSL_GUARDED_BY(mu) = 0;
  uint64_t first_read_ns ABSL_GUARDED_BY(mu) = 0;
};

Promoter::Promoter(memory::MemoryTier& memory, flash::FlashTier& flash, FlashReader& reader,
                   KeyLocks& locks, WorkerPool& pool, MetricsRegistry& metrics,
                   const PromoterOptions& options)
    : memory_(memory),
      flash_(flash),
      reader_(reader),
      locks_(locks),
      pool_(pool),
      sketch_(options.sketch_width),
      threshold_(options.threshold),
      on_hit_(options.on_hit),
      lease_ttl_ms_(options.lease_ttl_ms),
      max_inflight_bytes_(options.max_inflight_bytes),
      registry_(options.max_inflight,
                metrics.gauge("tierkv_promotions_inflight", "promotions in flight")),
      inflight_bytes_gauge_(
          metrics.gauge("tierkv_promotions_inflight_bytes", "bytes of the objects being promoted")),
      attempted_(metrics.counter("tierkv_promotions_attempted_total",
                                 "flash-to-memory promotions started")),
      done_(metrics.counter("tierkv_promotions_done_total", "promotions installed in memory")),
      failed_(metrics.counter("tierkv_promotions_failed_total",
                              "promotions that failed (read error, no room, superseded)")) {}

void Promoter::set_limits(int64_t threshold, int64_t max_inflight, int64_t max_inflight_bytes) {
  threshold_.store(threshold);
  registry_.set_cap(max_inflight);
  max_inflight_bytes_.store(max_inflight_bytes);
}

bool Promoter::charge_bytes(Job& job, uint64_t size) {
  const auto bytes = static_cast<int64_t>(size);
  int64_t now = inflight_bytes_.load();
  do {
    if (now > 0 && now + bytes > max_inflight_bytes_.load(std::memory_order_relaxed)) return false;
  } while (!inflight_bytes_.compare_exchange_weak(now, now + bytes));
  job.charged = bytes;
  inflight_bytes_gauge_.add(bytes);
  return true;
}

bool Promoter::admit(uint64_t key_hash) {
  if (!on_hit_.load(std::memory_order_relaxed)) return false;
  return sketch_.increment(key_hash) >= static_cast<uint32_t>(threshold_.load());
}

std::shared_ptr<Promoter::Job> Promoter::make_job(std::string_view key, PromotionRequest request,
                                                  PromotionDone done, bool attachable) {
  std::optional<InflightRegistry::Slot> slot = registry_.acquire(key, attachable);
  if (!slot) {
    if (done) done(PromotionOutcome::kBusy, 0);
    return nullptr;
  }
  auto job = std::make_shared<Job>();
  job->slot = std::move(*slot);
  job->request = std::move(request);
  job->done = std::move(done);
  if (attachable) registry_.set_job(key, job);
  attempted_.add();
  return job;
}

void Promoter::promote(std::string_view key, PromotionRequest request, PromotionDone done) {
  std::shared_ptr<Job> job = make_job(key, std::move(request), std::move(done));
  if (!job) return;
  bool queued = pool_.try_submit([this, job](bool run) {
    if (run)
      start(job);
    else
      finish(*job, PromotionOutcome::kCancelled);
  });
  if (!queued) finish(*job, PromotionOutcome::kBusy);
}

namespace {

// The room a promotion's reservations may take. A promotion is optional: it
// never waits for offloads to make room, and a speculative one (prefetch,
// kick) only drops clean data, for its chunks and its index room alike.
class RoomScope {
 public:
  explicit RoomScope(bool clean_only) {
    if (clean_only)
      clean_only_.emplace();
    else
      no_wait_.emplace();
  }

 private:
  std::optional<memory::MemoryTier::CleanOnlyScope> clean_only_;
  std::optional<memory::MemoryTier::NoWaitScope> no_wait_;
};

}  // namespace

Result<memory::ObjectWriter> Promoter::reserve(const Job& job, uint64_t size) {
  RoomScope room(job.request.clean_only);
  return memory_.prepare(job.slot.key(), size);
}

namespace {

// Marks the job launched when start() leaves, however it leaves.
class LaunchedOnExit {
 public:
  explicit LaunchedOnExit(PromotionJob& job) : job_(job) {}
  ~LaunchedOnExit() {
    {
      MutexLock lock(job_.mu);
      job_.launched = true;
    }
    job_.launched_cv.notify_all();
  }

 private:
  PromotionJob& job_;
};

}  // namespace

void Promoter::start(const std::shared_ptr<Job>& job) {
  {
    MutexLock lock(job->mu);
    if (std::exchange(job->started, true)) return;  // a read took it over
  }
  LaunchedOnExit launched(*job);
  const std::string& key = job->slot.key();
  if (job->request.still_wanted && !job->request.still_wanted())
    return finish(*job, PromotionOutcome::kDropped);
  // Side-effect-free re-check: no hit count, no lease, no policy touch.
  if (memory_.contains(key)) return finish(*job, PromotionOutcome::kInMemory);
  std::optional<flash::FlashObjectSummary> info = flash_.summary(key);
  if (!info || info->readable_chunks != reader_.chunk_count(info->object_size) ||
      (info->expire_at_ms != 0 && info->expire_at_ms <= unix_time_ms()))
    return finish(*job, PromotionOutcome::kGone);
  if (!charge_bytes(*job, info->object_size)) return finish(*job, PromotionOutcome::kBusy);
  // Chunks memory holds already (a clean object held in part) are copied
  // from there, not read again; pinned first, so making room cannot take them.
  std::vector<memory::ChunkPin> resident =
      memory_.resident_chunks(key, info->version, 0, reader_.chunk_count(info->object_size) - 1,
                              memory::GetOptions{.touch = false, .end_lease = false});
  Result<memory::ObjectWriter> writer = reserve(*job, info->object_size);
  if (!writer && writer.status().code() == StatusCode::kOutOfMemory && !resident.empty()) {
    // The part's own chunks may be the room the whole copy needs (a part
    // near half of memory): let them go and read them from flash instead.
    resident.clear();
    writer = reserve(*job, info->object_size);
  }
  if (!writer) {
    return finish(*job, writer.status().code() == StatusCode::kOutOfMemory
                            ? PromotionOutcome::kSaturated
                            : PromotionOutcome::kBusy);
  }
  FlashReadCallbacks ignore{[](ValuePiece) {}, [](Status) {}};
  std::shared_ptr<FlashRead> read =
      reader_.start(key, *info, 0, info->object_size, std::move(ignore), {}, std::move(*writer),
                    on_copied(job, info->version, info->expire_at_ms), std::move(resident),
                    std::nullopt, /*background=*/true);
  MutexLock lock(job->mu);
  job->read = std::move(read);
  job->version = info->version;
}

std::shared_ptr<FlashRead> Promoter::attach(std::string_view key, uint64_t version, uint64_t offset,
                                            uint64_t length, FlashReadCallbacks& callbacks) {
  std::shared_ptr<Job> job = registry_.job(key);
  if (!job) return nullptr;
  {
    MutexLock lock(job->mu);
    // Counted first: the install may run before follow() returns.
    if (job->reads++ == 0) job->first_read_ns = mono_ns();
    ++job->attached;
  }
  start(job);  // a job still queued starts now; a started one is left alone
  std::shared_ptr<FlashRead> read;
  {
    MutexLock lock(job->mu);
    while (!job->launched) job->launched_cv.wait(job->mu);
    if (job->version == version) read = job->read.lock();
  }
  std::shared_ptr<FlashRead> follower = reader_.follow(read, offset, length, callbacks);
  if (!follower) {
    // It reads flash itself, but it came: the copy needs no lease.
    MutexLock lock(job->mu);
    --job->attached;
  }
  return follower;
}

std::optional<Promoter::Copy> Promoter::begin_copy(std::string_view key,
                                                   const flash::FlashObjectSummary& info,
                                                   PromotionRequest request, PromotionDone done) {
  std::shared_ptr<Job> job =
      make_job(key, std::move(request), std::move(done), /*attachable=*/false);
  if (!job) return std::nullopt;
  if (!charge_bytes(*job, info.object_size)) {
    finish(*job, PromotionOutcome::kBusy);
    return std::nullopt;
  }
  Result<memory::ObjectWriter> writer = reserve(*job, info.object_size);
  if (!writer) {
    finish(*job, writer.status().code() == StatusCode::kOutOfMemory ? PromotionOutcome::kSaturated
                                                                    : PromotionOutcome::kBusy);
    return std::nullopt;
  }
  return Copy{std::move(*writer), on_copied(job, info.version, info.expire_at_ms)};
}

FlashReader::OnCopied Promoter::on_copied(std::shared_ptr<Job> job, uint64_t version,
                                          int64_t expire_at_ms) {
  // Runs on a flash I/O thread: the install moves to a pool worker.
  return
      [this, job = std::move(job), version, expire_at_ms](memory::ObjectWriter&& w, Status read) {
        auto writer = std::make_shared<memory::ObjectWriter>(std::move(w));
        pool_.submit_continuation([this, job, writer, version, expire_at_ms, read](bool run) {
          if (!run) return finish(*job, PromotionOutcome::kCancelled);
          if (!read.is_ok()) {
            spdlog::debug("promotion of {} failed: {}", job->slot.key(), read.to_string());
            return finish(*job, read.code() == StatusCode::kNotFound ? PromotionOutcome::kGone
                                                                     : PromotionOutcome::kIoError);
          }
          job->bytes = writer->size();
          finish(*job, install(*job, std::move(*writer), version, expire_at_ms));
        });
      };
}

PromotionOutcome Promoter::install(Job& job, memory::ObjectWriter&& writer, uint64_t version,
                                   int64_t expire_at_ms) {
  const std::string& key = job.slot.key();
  RoomScope room(job.request.clean_only);
  uint32_t chunks = static_cast<uint32_t>(writer.chunk_count());
  {
    MutexLock lock(locks_.for_hash(hash64(key)));
    if (!flash_.contains_object(key, version, chunks)) return PromotionOutcome::kGone;
    Result<memory::WriteResult> r = memory_.install_copy(std::move(writer), version, expire_at_ms);
    if (!r) return PromotionOutcome::kSaturated;
    if (!r->written) return PromotionOutcome::kInMemory;
  }
  if (!job.request.lease) return PromotionOutcome::kPromoted;
  const bool prefetch = job.request.trigger == PromotionTrigger::kPrefetch;
  {
    MutexLock lock(job.mu);
    // The read a lease waits for came while the job ran: no lease (it
    // would only hold memory until its TTL). Served by it, it counts.
    if (job.reads > 0) {
      const bool served = prefetch && job.attached > 0;
      if (job.request.on_early_read) job.request.on_early_read(job.first_read_ns, served);
      if (served) memory_.count_prefetch_read();
      return PromotionOutcome::kPromoted;
    }
  }
  // By version: the key may have been written since the install.
  (void)memory_.grant_lease(key, lease_ttl_ms_.load(std::memory_order_relaxed), prefetch, version);
  return PromotionOutcome::kPromoted;
}

void Promoter::finish(Job& job, PromotionOutcome outcome) {
  if (job.finished) return;
  job.finished = true;
  if (job.charged > 0) {
    inflight_bytes_.fetch_sub(job.charged);
    inflight_bytes_gauge_.add(-std::exchange(job.charged, 0));
  }
  (outcome == PromotionOutcome::kPromoted ? done_ : failed_).add();
  // The slot frees before `done` runs, so a caller that reacts by promoting
  // again is not refused as a duplicate of itself.
  job.slot.release();
  if (job.done) job.done(outcome, job.bytes);
}

}  // namespace tierkv
