// Store: writes that go straight to flash (StagedPut) and the preheat jobs
// built on them.
#include "flash/flash_tier.h"
#include "store/flashio/buffer_budget.h"
#include "store/flashio/flash_value_sink.h"
#include "store/flashio/staged_put.h"
#include "store/preheat/preheater.h"
#include "store/store.h"
#include "store/store_config.h"
#include "store/worker_pool.h"

namespace tierkv {

namespace {

Status no_flash() {
  return Status::unavailable("preheat needs the flash tier (flash-size > 0)");
}

}  // namespace

void Store::open_preheater(const Config& config) {
  preheater_ = std::make_unique<Preheater>(
      static_cast<size_t>(config.preheat_workers),
      [this](const std::string& key, uint64_t size, const StagedPutOptions& options) {
        return begin_staged_put(key, size, options);
      },
      *metrics_, memory_->chunk_size(), hooks_.before_preheat_job);
  preheater_->set_limits(preheat_limits(config));
  preheats_->attach(preheater_.get());
}

Result<std::unique_ptr<StagedPut>> Store::begin_staged_put(std::string_view key, uint64_t size,
                                                           const StagedPutOptions& options) {
  TIERKV_RETURN_IF_ERROR(check_key(key));
  TIERKV_RETURN_IF_ERROR(check_size(size));
  if (!flash_ || loading()) return Status::unavailable("a staged put needs the flash tier");
  const uint64_t chunk = memory_->chunk_size();
  const uint64_t chunks = size == 0 ? 1 : (size + chunk - 1) / chunk;
  const uint64_t version = memory_->take_version();
  Result<flash::FlashTier::StagedObject> staged =
      flash_->begin_staged({.key = key,
                            .version = version,
                            .object_size = size,
                            .chunk_count = static_cast<uint32_t>(chunks),
                            .expire_at_ms = options.expire_at_ms});
  if (!staged) return staged.status();
  StagedPutOptions opts = options;
  // A memory copy never takes more than a large value may (the rest of the
  // object is read from flash).
  if (opts.cache_in_memory && opts.memory_cap_bytes == 0) {
    opts.memory_cap_bytes =
        static_cast<int64_t>(large_value_fraction_ * static_cast<double>(memory_->budget_bytes()));
    // A fraction of 0 (or one that rounds to nothing) allows no memory copy;
    // a cap of 0 would mean none.
    if (opts.memory_cap_bytes <= 0) opts.cache_in_memory = false;
  }
  return std::make_unique<StagedPut>(std::move(*staged), *memory_, key_locks_, std::string(key),
                                     size, version, opts);
}

bool Store::writes_past_memory(uint64_t size) const {
  return flash_ != nullptr &&
         static_cast<double>(size) >
             large_value_fraction_ * static_cast<double>(memory_->budget_bytes());
}

Result<std::unique_ptr<FlashValueSink>> Store::begin_flash_value(std::string_view key,
                                                                 uint64_t size) {
  Result<std::unique_ptr<StagedPut>> put = begin_staged_put(key, size, StagedPutOptions{});
  if (!put) return put.status();
  return std::make_unique<FlashValueSink>(std::move(*put), *this, *pool_, write_buffers_,
                                          kFlashValueWindow);
}

void Store::copy_on_flash(FlashCopyRequest request, ExclusiveRunner exclusive,
                          std::function<void(Result<FlashCopyOutcome>)> done) {
  if (!flash_) return done(no_flash());
  auto copy = std::make_shared<FlashCopy>(*this, *flash_, std::move(request), std::move(exclusive));
  WorkerPool::Job job = [copy, done](bool run) {
    done(run ? copy->run()
             : Result<FlashCopyOutcome>(Status::unavailable("the server is shutting down")));
  };
  if (!pool_->try_submit(job)) done(Status::busy("the store's workers are all busy; try again"));
}

}  // namespace tierkv
