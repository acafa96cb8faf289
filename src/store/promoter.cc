#include "store/promoter.h"

#include <spdlog/spdlog.h>

#include "core/hash.h"

namespace tierkv {

Promoter::Promoter(memory::MemoryTier& memory, flash::FlashTier& flash, FlashReader& reader,
                   KeyLocks& locks, MetricsRegistry& metrics, const PromoterOptions& options)
    : memory_(memory),
      flash_(flash),
      reader_(reader),
      locks_(locks),
      sketch_(options.sketch_width),
      threshold_(options.threshold),
      max_inflight_(options.max_inflight),
      lease_ttl_ms_(options.lease_ttl_ms),
      attempted_(metrics.counter("tierkv_promotions_attempted_total",
                                 "flash-to-memory promotions started")),
      done_(metrics.counter("tierkv_promotions_done_total", "promotions installed in memory")),
      failed_(metrics.counter("tierkv_promotions_failed_total",
                              "promotions that failed (read error, no room, superseded)")),
      inflight_gauge_(metrics.gauge("tierkv_promotions_inflight", "promotions in flight")) {}

void Promoter::set_limits(int64_t threshold, int64_t max_inflight) {
  threshold_.store(threshold);
  max_inflight_.store(max_inflight);
}

bool Promoter::admit(uint64_t key_hash) {
  return sketch_.increment(key_hash) >= static_cast<uint32_t>(threshold_.load());
}

Result<memory::ObjectWriter> Promoter::begin(std::string_view key, uint64_t size) {
  {
    std::lock_guard lock(mu_);
    if (static_cast<int64_t>(inflight_.size()) >= max_inflight_.load())
      return Status::busy("promotions in flight at promotion-max-inflight");
    if (!inflight_.emplace(key).second) return Status::busy("promotion of the key in flight");
  }
  attempted_.add();
  inflight_gauge_.add(1);
  // Runs on network and I/O threads: a promotion is optional and must never
  // wait for offloads to make room.
  memory::MemoryTier::NoWaitScope no_wait;
  Result<memory::ObjectWriter> writer = memory_.prepare(key, size);
  if (!writer) {
    failed_.add();
    spdlog::debug("promotion of {} not started: {}", key, writer.status().to_string());
    end(key);
  }
  return writer;
}

void Promoter::end(std::string_view key) {
  std::lock_guard lock(mu_);
  inflight_.erase(std::string(key));
  inflight_gauge_.add(-1);
}

FlashReader::OnCopied Promoter::finisher(uint64_t version, int64_t expire_at_ms, bool lease,
                                         std::function<void(Status)> done) {
  return [this, version, expire_at_ms, lease, done = std::move(done)](memory::ObjectWriter&& w,
                                                                      Status read) {
    std::string key = w.key();
    Status st = read.is_ok() ? install(std::move(w), version, expire_at_ms, lease) : read;
    (st.is_ok() ? done_ : failed_).add();
    if (!st.is_ok()) spdlog::debug("promotion of {} failed: {}", key, st.to_string());
    end(key);
    if (done) done(st);
  };
}

Status Promoter::install(memory::ObjectWriter&& writer, uint64_t version, int64_t expire_at_ms,
                         bool lease) {
  std::string key = writer.key();
  memory::MemoryTier::NoWaitScope no_wait;
  uint32_t chunks = static_cast<uint32_t>(writer.chunk_count());
  {
    std::lock_guard lock(locks_.for_hash(hash64(key)));
    if (!flash_.contains_object(key, version, chunks))
      return Status::conflict("superseded on flash while being promoted");
    Result<memory::WriteResult> r = memory_.publish(
        std::move(writer), memory::WriteOptions{.condition = memory::WriteCondition::kIfAbsent,
                                                .expire_at_ms = expire_at_ms,
                                                .install_version = version});
    if (!r) return r.status();
    if (!r->written) return Status::conflict("memory already holds the key");
  }
  if (lease) (void)memory_.grant_lease(key, lease_ttl_ms_.load(std::memory_order_relaxed));
  return Status::ok();
}

void Promoter::promote(std::string_view key, bool lease, std::function<void(Status)> done) {
  std::optional<flash::FlashObjectSummary> info = flash_.summary(key);
  if (!info || info->readable_chunks != reader_.chunk_count(info->object_size)) {
    if (done) done(Status::ok());
    return;
  }
  Result<memory::ObjectWriter> writer = begin(key, info->object_size);
  if (!writer) {
    if (done) done(writer.status());
    return;
  }
  FlashReadCallbacks ignore{[](ValuePiece) {}, [](Status) {}};
  reader_.start(key, *info, 0, info->object_size, std::move(ignore), {}, std::move(*writer),
                finisher(info->version, info->expire_at_ms, lease, std::move(done)));
}

}  // namespace tierkv
