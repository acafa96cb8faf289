// FlashTier: what reclaiming a region does to its records, and the
// RegionCopier that RegionManager's reclaimer thread drives.
//
// RegionManager picks the victims (oldest first). A writer that needs a
// region reclaims the victim itself: that only drops index entries. With
// reinsertion, the chunks the policy keeps (read since they were written)
// are copied to the head of the log before the region goes, which means
// reading them from the device. No writer (often a network thread evicting
// to make room) may wait for that, so the reclaimer thread copies from the
// oldest regions ahead of the writers: it marks a region's kept chunks
// relocating, reads them without holding write_mu, and appends the copies;
// the region stays written until a writer reclaims it. If writers outrun it, they reclaim
// regions it has not copied from, without reinsertion.
#include <absl/container/inlined_vector.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "core/hash.h"
#include "flash/exact_io.h"
#include "flash/flash_tier.h"
#include "flash/flash_tier_internal.h"
#include "flash/record.h"
#include "flash/region_parse.h"
#include "flash/region_reclaimer.h"
#include "flash/reinsertion_policy.h"

namespace tierkv::flash {

bool FlashTier::Copier::may_copy() const {
  tier_.impl_->write_mu.assert_held();
  return !tier_.impl_->clearing;
}

void FlashTier::Copier::mark_kept(uint32_t region) {
  round_ = ReclaimRound{};
  tier_.begin_reclaim_round_locked(region, round_);
}

void FlashTier::Copier::read_kept() {
  tier_.list_reclaim_round(round_, region_buffer_);
  tier_.read_reinsertions(round_);
}

void FlashTier::Copier::append_kept() {
  tier_.finish_reclaim_round_locked(round_, to_submit_);
}

void FlashTier::Copier::submit() {
  LogWriter::submit(*tier_.impl_->engine, to_submit_);
  to_submit_.clear();
  round_ = ReclaimRound{};
}

bool FlashTier::reclaim_locked(uint32_t region) {
  Impl& im = *impl_;
  im.write_mu.assert_held();
  std::optional<std::vector<RegionResident>> listed;
  {
    // Before the index: an object installed after this has no chunk here.
    MutexLock landing(im.landing_mu);
    lose_staged_in_region_locked(region);
    listed = take_region_list_locked(region);
  }
  RegionManager::ReclaimPins pinned;
  {
    // Under the pin lock: a read pins the region before this drops its
    // chunks (and is waited for), or finds them gone and does not pin it.
    MutexLock pins(im.regions.pin_mutex());
    drop_region_chunks_locked(region, listed);
    // Readers compare this epoch: a record that changed under a read after
    // a reclaim is a race, not corruption.
    im.reclaim_epoch.fetch_add(1, std::memory_order_acq_rel);
    pinned = im.regions.reclaim_locked(region, /*self_pin=*/false);
  }
  if (pinned.read_by_others) retire_region_header_locked(region);
  im.regions.empty(region);
  im.metrics.reclaims.add();
  update_space_gauges_locked();
  return pinned.writable;
}

std::optional<std::vector<RegionResident>> FlashTier::take_region_list_locked(uint32_t region) {
  Impl& im = *impl_;
  im.landing_mu.assert_held();
  auto it = im.region_lists.find(region);
  if (it == im.region_lists.end()) return std::nullopt;
  std::optional<std::vector<RegionResident>> listed;
  if (it->second.complete && !it->second.spoiled) listed = std::move(it->second.residents);
  im.region_lists.erase(it);
  return listed;
}

void FlashTier::spoil_region_list_locked(uint64_t location) {
  Impl& im = *impl_;
  im.landing_mu.assert_held();
  if (im.region_lists.empty() || location == 0) return;
  auto it = im.region_lists.find(location::region(location));
  if (it != im.region_lists.end()) it->second.spoiled = true;
}

void FlashTier::drop_region_chunks_locked(
    uint32_t region, const std::optional<std::vector<RegionResident>>& listed) {
  Impl& im = *impl_;
  if (!listed) {
    im.metrics.reclaim_index_walks.add();
    im.index.drop_region(region);
    return;
  }
  im.index.drop_listed(region, *listed);
  if (!options_.check_region_lists) return;
  if (const size_t left = im.index.count_in_region(region); left != 0) {
    spdlog::critical("flash: {} chunks of region {} outlived its list-driven reclaim", left,
                     region);
    std::abort();
  }
}

// A draining region keeps its records for the reads that pin it, but must
// not keep its header: newer regions (tombstones, newer versions) are reused
// meanwhile, and a crash would let recovery scan this one back in and revive
// what they superseded. Regions are otherwise rewritten in the order they
// were reclaimed, which is what kept that from happening. Rare (only a
// reclaim that meets a read in progress), so written at once.
void FlashTier::retire_region_header_locked(uint32_t region) {
  Impl& im = *impl_;
  im.write_mu.assert_held();
  Result<uint64_t> watermark = impl_->super->take_seq();
  Status st = watermark.status();
  if (st.is_ok()) {
    AlignedBuffer header(kBlockSize);
    encode_region_header(header.data(), region, *watermark, options_.region_size, salt(),
                         kRegionFree);
    st = write_exact(im.fd.get(), header.data(), kBlockSize, region_start(region));
  }
  if (st.is_ok() && options_.fsync != FsyncPolicy::kNone && ::fdatasync(im.fd.get()) != 0)
    st = Status::io_error(std::string("fdatasync: ") + std::strerror(errno));
  if (!st.is_ok()) {
    im.metrics.write_errors.add();
    spdlog::error("flash: could not retire the header of draining region {}: {}", region,
                  st.to_string());
  }
}

void FlashTier::unpin_regions(std::span<const uint32_t> regions) const {
  Impl& im = *impl_;
  const absl::InlinedVector<uint32_t, 4> last_pins = im.regions.unpin(regions);
  if (last_pins.empty()) return;
  MutexLock lock(im.write_mu);
  for (uint32_t r : last_pins) im.regions.unpin_last(r);
}

// Also without reinsertion: its rounds then only list the oldest regions'
// chunks, so that the writer that reclaims one drops them by the list and
// does not walk the whole index under the write lock.
void FlashTier::start_reclaimer() {
  Impl& im = *impl_;
  copier_ = std::make_unique<Copier>(*this);
  std::unique_ptr<ReinsertionPolicy> policy;
  if (options_.reinsertion)
    policy =
        std::make_unique<HitsReinsertionPolicy>(options_.region_size, options_.reinsertion_share);
  im.regions.start_reclaimer(im.write_mu, *copier_, std::move(policy));
}

bool FlashTier::wait_for_reclaimer(std::chrono::milliseconds timeout) {
  return impl_->regions.wait_for_reclaimer(timeout);
}

void FlashTier::stop_reclaimer() {
  impl_->regions.stop_reclaimer();
}

void FlashTier::begin_reclaim_round_locked(uint32_t region, ReclaimRound& round) {
  Impl& im = *impl_;
  im.write_mu.assert_held();
  round.region = region;
  {
    // Its chunks are read next: a writer that reclaims the region meanwhile
    // leaves it draining until the round unpins it.
    MutexLock pins(im.regions.pin_mutex());
    im.regions.pin_locked(region);
  }
  round.seq = im.regions.state(region).seq;
  round.fill = im.regions.state(region).fill;
  MutexLock landing(im.landing_mu);
  im.region_lists[region] = Impl::RegionList{};
  round.generation = im.generation;
}

// Without the write lock: at tens of millions of objects the walk takes a
// fraction of a second, which writers would wait for. A writer that
// reclaims the region meanwhile takes the unfinished list (and walks
// itself), so the list found gone is not kept: it would name another
// incarnation's chunks. Chunks this marks are the round's to settle
// whenever that reclaim comes, as they were when the walk held the lock.
void FlashTier::list_reclaim_round(ReclaimRound& round, AlignedBuffer& region_buffer) {
  Impl& im = *impl_;
  {
    MutexLock landing(im.landing_mu);
    if (round.generation != im.generation || !im.region_lists.contains(round.region)) return;
  }
  std::vector<RegionResident> residents;
  if (mark_round_by_records(round, region_buffer, residents)) {
    im.metrics.reclaim_region_reads.add();
  } else if (im.regions.reinsertion()) {
    im.index.mark_for_reinsertion(round.region, round.hits, round.yield, &residents);
  } else {
    im.index.list_region(round.region, residents);
  }
  MutexLock landing(im.landing_mu);
  auto it = im.region_lists.find(round.region);
  if (it == im.region_lists.end() || round.generation != im.generation) return;
  it->second.residents = std::move(residents);
  it->second.complete = true;
}

// A parse that dropped a record, or left damage at its end, may have
// missed a chunk the index holds there: the walk finds every one.
bool FlashTier::mark_round_by_records(ReclaimRound& round, AlignedBuffer& region_buffer,
                                      std::vector<RegionResident>& residents) {
  Impl& im = *impl_;
  const uint64_t min_chunks = options_.round_read_min_chunks.value_or(options_.region_size / 16);
  if (im.index.chunk_count() < min_chunks) return false;
  const uint64_t length = std::min<uint64_t>(align_up(round.fill), options_.region_size);
  if (region_buffer.size() < length)
    region_buffer = AlignedBuffer(options_.region_size, AlignedBuffer::Uninitialized{});
  const uint64_t start = region_start(round.region);
  if (!read_exact(im.fd.get(), region_buffer.data(), length, start).is_ok()) return false;
  RegionScan scan;
  parse_region(region_buffer.data(), length, start, round.region, round.seq, salt(), scan);
  // Buffered I/O: the region is about to be reclaimed, and its pages would
  // push others out of the page cache. Its read chunks are copied from here.
  if (!direct_io_)
    (void)::posix_fadvise(im.fd.get(), static_cast<off_t>(start), static_cast<off_t>(length),
                          POSIX_FADV_DONTNEED);
  if (scan.dropped != 0 || scan.tail_gap) return false;
  const bool reinsertion = im.regions.reinsertion() != nullptr;
  im.index.mark_records(round.region, scan.records, reinsertion ? &round.hits : nullptr,
                        reinsertion ? &round.yield : nullptr, residents);
  round.region_bytes = region_buffer.data();
  round.parsed = length;
  return true;
}

void FlashTier::read_reinsertions(ReclaimRound& round) {
  Impl& im = *impl_;
  if (im.regions.reinsertion() == nullptr) return;  // a round that only lists
  if (options_.before_reinsert_read) options_.before_reinsert_read();
  ReinsertionPolicy& policy = *im.regions.reinsertion();
  policy.begin_region(round.yield);
  for (ReinsertCandidate& h : round.hits) {
    const location::ReadSpan span = location::read_span(h.location, kBlockSize);
    const uint64_t size = location::length_bytes(h.location);
    const uint64_t offset = region_start(round.region) + span.start;
    auto held = [&] {
      return options_.held_elsewhere && options_.held_elsewhere(h.key, h.version);
    };
    // Not copied by choice: it stays readable until its region is reclaimed;
    // if a writer reclaimed it since the round began (it drains under the
    // round's pin), the chunk goes, as drop_region() would have dropped it.
    // Kept there, it would outlive the region, and read another record once
    // the region is written again.
    auto keep = [&] {
      MutexLock pins(im.regions.pin_mutex());
      if (im.regions.draining_locked(round.region))
        im.index.drop_chunk(h.key, h.key_hash, h.chunk_index, h.location);
      else
        im.index.keep_in_place(h.key, h.key_hash, h.chunk_index, h.location);
    };
    // A compact entry's candidate has no key yet: its record tells.
    if (!policy.admit(h, size) || (!h.key.empty() && held())) {
      keep();
      continue;
    }
    Reinsert r;
    // Filled whole by the copy or the read below (a failed read is not used).
    r.buffer = BufferPool::take_from(options_.buffer_pool, span.length);
    Status read = Status::ok();
    if (span.start + span.length <= round.parsed)
      std::memcpy(r.buffer.data(), round.region_bytes + span.start, span.length);
    else
      read = read_exact(im.fd.get(), r.buffer.data(), span.length, offset);
    Result<RecordView> rec =
        read.is_ok() ? decode_record(r.buffer.data() + span.skew, span.length - span.skew,
                                     {salt(), offset + span.skew})
                     : Result<RecordView>(read);
    if (rec.is_ok() && h.key.empty() &&
        im.index.same_object(h.key_hash, im.index.key_hash(rec->key))) {
      h.key.assign(rec->key);
      h.key_hash = im.index.key_hash(h.key);
      if (held()) {
        keep();
        continue;
      }
    }
    if (!rec.is_ok() || rec->key != h.key || rec->header.chunk_index != h.chunk_index ||
        rec->header.object_version != h.version) {
      im.index.drop_chunk(h.key, h.key_hash, h.chunk_index, h.location);
      continue;
    }
    policy.copied(size);
    r.chunk.key = std::move(h.key);
    r.chunk.key_hash = h.key_hash;
    r.chunk.chunk_index = h.chunk_index;
    r.chunk.version = h.version;
    r.chunk.object_size = h.object_size;
    r.chunk.chunk_count = rec->header.chunk_count;
    r.chunk.expire_at_ms = h.expire_at_ms;  // the index's: set_expiry may postdate the record
    r.chunk.old_location = h.location;
    r.chunk.reinsertion = true;
    r.data = rec->data;
    round.copies.push_back(std::move(r));
  }
  if (options_.after_reinsert_read && !round.copies.empty()) options_.after_reinsert_read();
}

void FlashTier::finish_reclaim_round_locked(ReclaimRound& round,
                                            std::vector<IoRequest*>& to_submit) {
  Impl& im = *impl_;
  im.write_mu.assert_held();
  // clear() ran meanwhile: it freed every region, this one included.
  const bool cleared = round.generation != im.generation || im.clearing;
  for (Reinsert& r : round.copies) {
    PendingChunk& c = r.chunk;
    Status st = cleared ? Status::busy("flash cleared during reinsertion") : Status::ok();
    // Looked up again under write_mu, which every tombstone and expiry
    // record is appended under: a DEL or EXPIRE that came during the device
    // read above is either seen here (the copy is skipped, or carries the
    // new expiry), or its record lands after the copy in the log, so a
    // recovery scan replays them in their true order.
    std::optional<int64_t> expiry;
    if (st.is_ok())
      expiry = im.index.relocating_expiry(c.key, c.key_hash, c.chunk_index, c.version);
    if (st.is_ok() && !expiry) continue;  // removed or superseded: nothing to copy
    if (st.is_ok()) {
      c.expire_at_ms = *expiry;
      st = append_locked(c, r.data);
    }
    if (!st.is_ok()) im.index.drop_chunk(c.key, c.key_hash, c.chunk_index, c.old_location);
  }
  // After the copies: appending them may reclaim this region, which its
  // pin then keeps readable (draining) until here, as for any read.
  for (uint32_t r : im.regions.unpin({&round.region, 1})) im.regions.unpin_last(r);
  im.log.kick(to_submit);
}

}  // namespace tierkv::flash
