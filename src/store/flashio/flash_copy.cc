#include "store/flashio/flash_copy.h"

#include <optional>
#include <vector>

#include "core/clock.h"
#include "core/metrics.h"
#include "core/mutex.h"
#include "flash/flash_tier.h"
#include "store/flashio/staged_put.h"
#include "store/store.h"

namespace tierkv {

namespace {
constexpr int kAttempts = 4;
// Chunk reads in flight while copying: enough to keep the device busy, few
// enough that a copy does not crowd out the reads of clients.
constexpr uint32_t kReadWindow = 4;

using Step = Result<std::optional<FlashCopyOutcome>>;
Step ended(FlashCopyOutcome outcome) {
  return std::optional<FlashCopyOutcome>(outcome);
}
// Something changed under the copy: try again.
Step again() {
  return std::optional<FlashCopyOutcome>();
}
}  // namespace

struct FlashCopy::Tombstone {
  Mutex mu;
  CondVar cv;
  bool landed ABSL_GUARDED_BY(mu) = false;
  Status status ABSL_GUARDED_BY(mu);
};

FlashCopy::FlashCopy(Store& store, flash::FlashTier& flash, FlashCopyRequest request,
                     ExclusiveRunner exclusive)
    : store_(store),
      flash_(flash),
      request_(std::move(request)),
      exclusive_(std::move(exclusive)) {}

Result<FlashCopyOutcome> FlashCopy::run() {
  for (int i = 0; i < kAttempts; ++i) {
    Step step = attempt();
    if (!step) return step.status();
    if (!step->has_value()) continue;
    if (**step == FlashCopyOutcome::kCopied && tombstone_) {
      TIERKV_RETURN_IF_ERROR(wait_for_tombstone());
    }
    return **step;
  }
  return Status::busy("the source or destination kept changing during the copy; try again");
}

Step FlashCopy::attempt() {
  std::optional<ObjectInfo> src = store_.stat_brief(request_.source);
  if (!src) return ended(FlashCopyOutcome::kNoSource);
  std::optional<flash::FlashTier::VersionLocations> where =
      flash_.locate_version(request_.source, src->version);
  if (!where) return ended(FlashCopyOutcome::kSourceInMemory);
  if (request_.if_absent && store_.stat_brief(request_.destination)) {
    return ended(FlashCopyOutcome::kDestinationExists);
  }
  Result<std::unique_ptr<StagedPut>> put = store_.begin_staged_put(
      request_.destination, src->size, StagedPutOptions{.expire_at_ms = src->expire_at_ms});
  if (!put) return put.status();
  Status copied = copy_chunks(**put, src->version, *where);
  // A chunk that is gone was reclaimed under a source that changed.
  if (copied.code() == StatusCode::kNotFound) return again();
  TIERKV_RETURN_IF_ERROR(copied);
  TIERKV_RETURN_IF_ERROR((*put)->await_body());
  return finish(**put, src->version);
}

Status FlashCopy::copy_chunks(StagedPut& put, uint64_t version,
                              const flash::FlashTier::VersionLocations& known) {
  const auto chunk_count = static_cast<uint32_t>(known.locations.size());
  struct Batch {
    Mutex mu;
    CondVar cv;
    size_t left ABSL_GUARDED_BY(mu) = 0;
    // Read after left reaches 0, when no callback touches it any more.
    std::vector<std::optional<Result<flash::FlashChunk>>> chunks;
  };
  for (uint32_t first = 0; first < chunk_count; first += kReadWindow) {
    const uint32_t n = std::min(kReadWindow, chunk_count - first);
    auto batch = std::make_shared<Batch>();
    {
      MutexLock lock(batch->mu);  // before any read can call back
      batch->left = n;
    }
    batch->chunks.resize(n);
    std::vector<uint32_t> indexes;
    for (uint32_t i = 0; i < n; ++i) indexes.push_back(first + i);
    flash_.read_chunks(
        request_.source, indexes, version,
        [batch, first](uint32_t index, Result<flash::FlashChunk> chunk) {
          MutexLock lock(batch->mu);
          batch->chunks[index - first].emplace(std::move(chunk));
          if (--batch->left == 0) batch->cv.notify_all();
        },
        &known);
    {
      MutexLock lock(batch->mu);
      while (batch->left != 0) batch->cv.wait(batch->mu);
    }
    for (uint32_t i = 0; i < n; ++i) {
      Result<flash::FlashChunk>& chunk = *batch->chunks[i];
      if (!chunk) return chunk.status();
      const uint64_t offset = static_cast<uint64_t>(first + i) * put.chunk_size();
      TIERKV_RETURN_IF_ERROR(put.write(offset, chunk->data()));
    }
  }
  return Status::ok();
}

Step FlashCopy::finish(StagedPut& put, uint64_t version) {
  Histogram& held =
      store_.metrics().latency("tierkv_flash_copy_exclusive",
                               "How long the end of a flash-to-flash RENAME or COPY held "
                               "every I/O thread");
  Step step = again();
  Status ran = StagedPut::run_exclusive(exclusive_, [&] {
    const uint64_t start = mono_ns();
    bool busy = false;
    step = finish_exclusive(put, version, busy);
    held.record(mono_ns() - start);
    return busy;
  });
  if (!ran.is_ok()) return ran;
  return step;
}

Step FlashCopy::finish_exclusive(StagedPut& put, uint64_t version, bool& busy) {
  std::optional<ObjectInfo> src = store_.stat_brief(request_.source);
  if (!src) return ended(FlashCopyOutcome::kNoSource);
  if (src->version != version) return again();
  std::optional<ObjectInfo> dst = store_.stat_brief(request_.destination);
  if (dst && request_.if_absent) return ended(FlashCopyOutcome::kDestinationExists);
  // Written after this copy began: its version is newer than the staged
  // one, which the commit would refuse to replace.
  if (dst && dst->version > put.version()) return again();
  put.set_expiry(src->expire_at_ms);  // an EXPIRE may have come meanwhile
  Status queued = put.try_write_last();
  if (queued.code() == StatusCode::kBusy) {
    busy = true;
    return again();
  }
  TIERKV_RETURN_IF_ERROR(queued);
  Result<memory::WriteResult> written = put.await_last();
  if (!written) {
    if (written.status().code() == StatusCode::kConflict) return again();
    return written.status();
  }
  if (request_.remove_source) {
    Store::DurableCallback durable;
    if (request_.durable) {
      tombstone_ = std::make_shared<Tombstone>();
      durable = [t = tombstone_](Status s) {
        MutexLock lock(t->mu);
        t->landed = true;
        t->status = std::move(s);
        t->cv.notify_all();
      };
    }
    store_.remove(request_.source, version, std::move(durable));
  }
  return ended(FlashCopyOutcome::kCopied);
}

Status FlashCopy::wait_for_tombstone() {
  MutexLock lock(tombstone_->mu);
  while (!tombstone_->landed) tombstone_->cv.wait(tombstone_->mu);
  return tombstone_->status;
}

}  // namespace tierkv
