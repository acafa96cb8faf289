// FlashTier: the superblock, and recovery of the index at open.
//
// Recovery reads every live region (valid header under this device's salt)
// in sequence order and feeds its records, in log order, to a RecoveryScan:
// * a tombstone removes every version of its key up to its own, including
//   records that come later in the log (writes that were in flight);
// * an expiry record sets the expiry of the version it names;
// * chunks of a multi-chunk version gather off to the side until every
//   chunk is there; only then does the version replace the one indexed. So
//   a crash in the middle of an overwrite leaves the previous version whole.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "core/clock.h"
#include "core/hash.h"
#include "core/mutex.h"
#include "flash/exact_io.h"
#include "flash/flash_tier.h"
#include "flash/flash_tier_internal.h"
#include "flash/record.h"
#include "flash/region_parse.h"

namespace tierkv::flash {

namespace {

// Feeds records, in log order, into the index (see the file comment).
class RecoveryScan {
 public:
  RecoveryScan(FlashIndex& index, RecoveryStats& stats) : index_(index), stats_(stats) {}

  void add(const ParsedRecord& rec) {
    const uint64_t version = rec.header.object_version;
    max_seen_ = std::max(max_seen_, version);
    const uint64_t key_hash = index_.key_hash(rec.key);
    if (rec.header.flags & kRecordTombstone) {
      on_tombstone(rec.key, key_hash, version);
    } else if (rec.header.flags & kRecordExpiry) {
      on_expiry(rec.key, key_hash, version, rec.header.expire_at_ms);
    } else if (!tombstoned(rec.key, version)) {
      on_chunk(rec, key_hash);
    }
  }

  // Versions still incomplete at the end of the log are dropped: the
  // version indexed before them (if any) stays.
  void finish() { stats_.objects_incomplete += partial_.size(); }

  // Every version any valid record names, indexed or not: new versions
  // must not collide with leftovers of an incomplete one.
  uint64_t max_version_seen() const { return max_seen_; }

 private:
  struct Partial {
    uint64_t version = 0;
    uint64_t object_size = 0;
    uint32_t chunk_count = 0;
    int64_t expire_at_ms = 0;
    std::vector<std::pair<uint32_t, uint64_t>> chunks;  // index, location
  };

  bool tombstoned(std::string_view key, uint64_t version) const {
    if (tombstones_.empty()) return false;
    auto it = tombstones_.find(std::string(key));
    return it != tombstones_.end() && it->second >= version;
  }

  void on_tombstone(std::string_view key, uint64_t key_hash, uint64_t version) {
    auto [it, inserted] = tombstones_.try_emplace(std::string(key), version);
    if (!inserted) it->second = std::max(it->second, version);
    index_.remove_up_to(key, key_hash, version);
    ++stats_.tombstones;
    if (partial_.empty()) return;
    auto p = partial_.find(std::string(key));
    if (p != partial_.end() && p->second.version <= version) partial_.erase(p);
  }

  void on_expiry(std::string_view key, uint64_t key_hash, uint64_t version, int64_t expire_at_ms) {
    // Applies only to the version it names; log order makes the last one win.
    index_.set_expiry(key, key_hash, version, expire_at_ms);
    ++stats_.expiry_records;
    if (partial_.empty()) return;
    auto p = partial_.find(std::string(key));
    if (p != partial_.end() && p->second.version == version) p->second.expire_at_ms = expire_at_ms;
  }

  void on_chunk(const ParsedRecord& rec, uint64_t key_hash) {
    const uint64_t location = rec.location;
    const RecordHeader& h = rec.header;
    std::optional<FlashObjectSummary> indexed = index_.summary(rec.key, key_hash);
    // More chunks (or relocated copies) of the version indexed, or a version
    // that needs no gathering: straight into the index.
    if ((indexed && indexed->version == h.object_version) || h.chunk_count <= 1) {
      if (index_.add(rec.key, key_hash, h.chunk_index, h.object_version, h.object_size, location,
                     h.chunk_count, h.expire_at_ms)) {
        ++stats_.records_recovered;
        if (partial_.empty()) return;
        auto p = partial_.find(std::string(rec.key));
        if (p != partial_.end() && p->second.version <= h.object_version) partial_.erase(p);
      }
      return;
    }
    if (indexed && indexed->version > h.object_version) return;
    auto [it, inserted] = partial_.try_emplace(std::string(rec.key));
    Partial& p = it->second;
    if (!inserted && p.version > h.object_version) return;
    if (inserted || p.version < h.object_version) {
      p = Partial{h.object_version, h.object_size, h.chunk_count, h.expire_at_ms, {}};
    }
    // A staged object's expiry may be known only at its commit: its last
    // chunk, written last, carries the one that counts.
    if (h.chunk_index + 1 == h.chunk_count) p.expire_at_ms = h.expire_at_ms;
    auto same = std::find_if(p.chunks.begin(), p.chunks.end(),
                             [&](const auto& c) { return c.first == h.chunk_index; });
    if (same != p.chunks.end()) {
      same->second = location;  // a later copy of the chunk
    } else {
      p.chunks.emplace_back(h.chunk_index, location);
    }
    if (p.chunks.size() == p.chunk_count) promote(it->first, key_hash, p);
  }

  // A gathered version is complete: it replaces whatever was indexed.
  void promote(std::string_view key, uint64_t key_hash, const Partial& p) {
    for (const auto& [chunk, location] : p.chunks) {
      index_.add(key, key_hash, chunk, p.version, p.object_size, location, p.chunk_count,
                 p.expire_at_ms);
    }
    index_.set_expiry(key, key_hash, p.version, p.expire_at_ms);
    stats_.records_recovered += p.chunks.size();
    partial_.erase(std::string(key));
  }

  FlashIndex& index_;
  RecoveryStats& stats_;
  absl::flat_hash_map<std::string, uint64_t> tombstones_;  // key -> removed up to version
  absl::flat_hash_map<std::string, Partial> partial_;
  uint64_t max_seen_ = 0;
};

// Reads and parses regions on a few threads, a bounded window ahead (one
// region buffer each), while the caller applies them strictly in log order.
class ParallelRegionReader {
 public:
  using Parse = std::function<void(size_t i, RegionScan& out, AlignedBuffer& buffer)>;

  ParallelRegionReader(size_t count, uint64_t region_size, Parse parse)
      : results_(count), parse_(std::move(parse)) {
    const size_t workers = std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 4);
    window_ = workers + 1;
    for (size_t w = 0; w < std::min(workers, count); ++w)
      threads_.emplace_back([this, region_size] { work(region_size); });
  }
  ~ParallelRegionReader() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  ParallelRegionReader(const ParallelRegionReader&) = delete;
  ParallelRegionReader& operator=(const ParallelRegionReader&) = delete;

  // Waits for region i (taken in order) and lets the readers move on.
  RegionScan take(size_t i) {
    RegionScan out;
    {
      MutexLock lock(mu_);
      while (!results_[i].done) cv_.wait(mu_);
      out = std::move(results_[i]);
      taken_ = i + 1;
    }
    cv_.notify_all();
    return out;
  }

 private:
  void work(uint64_t region_size) {
    AlignedBuffer buffer(region_size, AlignedBuffer::Uninitialized{});
    for (;;) {
      size_t i = 0;
      {
        MutexLock lock(mu_);
        while (!stop_ && next_ < results_.size() && next_ >= taken_ + window_) cv_.wait(mu_);
        if (stop_ || next_ >= results_.size()) return;
        i = next_++;
      }
      RegionScan scanned;
      parse_(i, scanned, buffer);
      {
        MutexLock lock(mu_);
        results_[i] = std::move(scanned);
        results_[i].done = true;
      }
      cv_.notify_all();
    }
  }

  Mutex mu_;
  CondVar cv_;
  std::vector<RegionScan> results_ ABSL_GUARDED_BY(mu_);
  Parse parse_;
  size_t window_ = 2;  // set before the workers start
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  size_t taken_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace

uint64_t FlashTier::region_start(uint32_t region) const {
  return region_offset(region, options_.region_size);
}

uint64_t FlashTier::salt() const {
  return impl_->super->salt();
}

Status FlashTier::recover() {
  Impl& im = *impl_;
  const uint64_t start = mono_ns();
  if (options_.progress) options_.progress->start_ms.store(static_cast<uint64_t>(unix_time_ms()));
  im.super.emplace(im.fd.get(), options_.region_size, region_count_);
  TIERKV_RETURN_IF_ERROR(im.super->load(file_path_));
  im.regions.reset(region_count_);
  const bool from_snapshot = load_snapshot();
  if (!from_snapshot) TIERKV_RETURN_IF_ERROR(scan_regions());
  TIERKV_RETURN_IF_ERROR(im.super->finish_open());
  im.max_version_seen.store(recovered_max_version_);
  recovery_.from_snapshot = from_snapshot;
  recovery_.objects = im.index.object_count();
  recovery_.duration_us = (mono_ns() - start) / 1000;
  im.metrics.regions.set(region_count_);
  im.metrics.recovered_records.add(recovery_.records_recovered);
  im.metrics.recovery_dropped_records.add(recovery_.records_dropped);
  {
    MutexLock lock(im.write_mu);
    update_space_gauges_locked();
  }
  update_index_gauges();
  log_recovery();
  return Status::ok();
}

// Rebuilds the index by reading every live region (see the file comment).
Status FlashTier::scan_regions() {
  Impl& im = *impl_;
  const uint64_t salt = im.super->salt();
  std::vector<std::pair<uint64_t, uint32_t>> live;  // (seq, region)
  AlignedBuffer header(kBlockSize);
  for (uint32_t r = 0; r < region_count_; ++r) {
    TIERKV_RETURN_IF_ERROR(read_exact(im.fd.get(), header.data(), kBlockSize, region_start(r)));
    Result<RegionHeader> h = decode_region_header(header.data(), kBlockSize, salt);
    if (!h.is_ok()) {
      RegionHeader raw;
      std::memcpy(&raw, header.data(), sizeof(raw));
      if (raw.magic == kRegionMagic && raw.format_version < kFormatVersion) {
        ++recovery_.regions_old_format;  // its records cannot be read: the region is free
      } else if (raw.magic == kRegionMagic) {
        ++recovery_.regions_corrupt;
      }
      continue;
    }
    // A header from another layout (region size changed) describes nothing here.
    if (h->region_index != r || h->region_size != options_.region_size || h->seq == 0) continue;
    im.super->saw_seq(h->seq);
    // Wiped by clear(): free, but later incarnations number above it.
    if (!(h->flags & kRegionFree)) live.emplace_back(h->seq, r);
  }
  std::sort(live.begin(), live.end());
  if (options_.progress) options_.progress->bytes_total.store(live.size() * options_.region_size);
  RecoveryScan scan(im.index, recovery_);
  ParallelRegionReader reader(
      live.size(), options_.region_size, [&](size_t i, RegionScan& out, AlignedBuffer& buffer) {
        const auto [seq, r] = live[i];
        out.status = read_exact(im.fd.get(), buffer.data(), options_.region_size, region_start(r));
        if (out.status.is_ok())
          parse_region(buffer.data(), options_.region_size, region_start(r), r, seq, salt, out);
      });
  for (size_t i = 0; i < live.size(); ++i) {
    const auto [seq, r] = live[i];
    RegionScan scanned = reader.take(i);
    TIERKV_RETURN_IF_ERROR(scanned.status);
    for (const ParsedRecord& rec : scanned.records) {
      scan.add(rec);
      if (options_.key_load_delay_us)
        std::this_thread::sleep_for(std::chrono::microseconds(options_.key_load_delay_us));
    }
    recovery_.records_dropped += scanned.dropped;
    im.regions.restore_written(r, seq, scanned.fill);
    ++recovery_.regions_scanned;
    if (options_.progress) options_.progress->bytes_done.fetch_add(options_.region_size);
  }
  scan.finish();
  im.regions.finish_restore();
  recovered_max_version_ = std::max(im.index.max_version(), scan.max_version_seen());
  return Status::ok();
}

void FlashTier::log_recovery() const {
  if (recovery_.from_snapshot) {
    spdlog::info("flash: index loaded from the snapshot: {} objects, {} regions in {:.1f} ms",
                 recovery_.objects, impl_->regions.written().size(),
                 recovery_.duration_us / 1000.0);
    return;
  }
  spdlog::info(
      "flash: recovered {} objects ({} chunk records, {} tombstones) from {} regions in {:.1f} ms; "
      "dropped {} torn or corrupt records, {} incomplete versions, {} corrupt region headers",
      recovery_.objects, recovery_.records_recovered, recovery_.tombstones,
      recovery_.regions_scanned, recovery_.duration_us / 1000.0, recovery_.records_dropped,
      recovery_.objects_incomplete, recovery_.regions_corrupt);
  if (recovery_.regions_old_format > 0) {
    spdlog::warn("flash: {} regions were written in an older format (before {}) and are discarded",
                 recovery_.regions_old_format, kFormatVersion);
  }
}

}  // namespace tierkv::flash
