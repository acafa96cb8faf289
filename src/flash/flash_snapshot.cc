// FlashTier: the index snapshot of a clean shutdown.
//
// At a clean shutdown the index and the region state (sequence numbers,
// fill, FIFO order) are written to the snapshot area at the end of the
// device, then the superblock records the snapshot's length and checksum.
// The next open loads it instead of scanning every region, and clears the
// superblock's record of it before anything else is written: a snapshot is
// used at most once, and never after a later write, so a start after a
// crash always scans. A write after the snapshot (a late command during
// shutdown) clears it first, synchronously.
//
//   header   magic "TKVI" | format | region count | fifo count | entries | max version
//   regions  region count x {seq, fill}
//   fifo     fifo count x region index (u32)
//   entries  {key length u32, slots u32, version, object size, expiry,
//             slots x location, key bytes}       (the keyed index entries)
//   compact  shards u32 | bucket bits u32, then for every bucket of every
//            shard: {entries u32, entries x 21 B} (CompactTable's bytes);
//            then expiries: count u64, count x {ident, unix ms}
//
// The checksum (xxh3, salted like records) covers the whole body.
#define XXH_STATIC_LINKING_ONLY
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <future>

#include "core/clock.h"
#include "flash/exact_io.h"
#include "flash/flash_tier.h"
#include "flash/flash_tier_internal.h"
#include "flash/record.h"

namespace tierkv::flash {

namespace {

constexpr uint32_t kSnapshotMagic = 0x49564B54;  // "TKVI"
// Format 4 may hold packed locations (flash_index.h); format 3's are all of
// the unpacked form, so they load as they are. A binary from before packing
// refuses format 4 and scans the log instead. Format 5 added the compact
// section; before it every entry was keyed (a single-chunk one loads into
// the compact table).
constexpr uint16_t kSnapshotFormat = 5;
constexpr uint16_t kFirstCompactFormat = 5;
constexpr uint16_t kOldestSnapshotFormat = 3;
constexpr size_t kSnapshotBuffer = size_t{4} << 20;

struct SnapshotHeader {
  uint32_t magic = kSnapshotMagic;
  uint16_t format_version = kSnapshotFormat;
  uint16_t reserved = 0;
  uint32_t region_count = 0;
  uint32_t fifo_count = 0;
  uint64_t entries = 0;
  uint64_t max_version = 0;
};

struct EntryHeader {
  uint32_t key_length = 0;
  uint32_t slots = 0;
  uint64_t version = 0;
  uint64_t object_size = 0;
  int64_t expire_at_ms = 0;
};

// xxh3 of the salt, then of every byte put or got.
class SnapshotHash {
 public:
  explicit SnapshotHash(uint64_t salt) : state_(XXH3_createState()) {
    XXH3_64bits_reset(state_);
    XXH3_64bits_update(state_, &salt, sizeof(salt));
  }
  ~SnapshotHash() { XXH3_freeState(state_); }
  SnapshotHash(const SnapshotHash&) = delete;
  SnapshotHash& operator=(const SnapshotHash&) = delete;
  void update(const void* p, size_t n) { XXH3_64bits_update(state_, p, n); }
  uint64_t digest() const { return XXH3_64bits_digest(state_); }

 private:
  XXH3_state_t* state_;
};

// Streams the body to the area through one aligned buffer.
class SnapshotWriter {
 public:
  SnapshotWriter(int fd, uint64_t offset, uint64_t capacity, uint64_t salt)
      : fd_(fd), offset_(offset), capacity_(capacity), hash_(salt), buffer_(kSnapshotBuffer) {}

  // False once the body would not fit in the area.
  bool put(const void* data, size_t n) {
    if (!status_.is_ok() || length_ + n > capacity_) return false;
    hash_.update(data, n);
    length_ += n;
    const char* p = static_cast<const char*>(data);
    while (n > 0 && status_.is_ok()) {
      const size_t take = std::min(n, buffer_.size() - used_);
      std::memcpy(buffer_.data() + used_, p, take);
      used_ += take;
      p += take;
      n -= take;
      if (used_ == buffer_.size()) drain();
    }
    return status_.is_ok();
  }
  Status finish() {
    if (status_.is_ok() && used_ > 0) drain();
    return status_;
  }
  uint64_t length() const { return length_; }
  uint64_t checksum() const { return hash_.digest(); }

 private:
  void drain() {
    const size_t bytes = align_up(used_);
    std::memset(buffer_.data() + used_, 0, bytes - used_);
    status_ = write_exact(fd_, buffer_.data(), bytes, offset_ + flushed_);
    flushed_ += bytes;
    used_ = 0;
  }

  int fd_;
  uint64_t offset_, capacity_;
  SnapshotHash hash_;
  AlignedBuffer buffer_;
  size_t used_ = 0;
  uint64_t flushed_ = 0, length_ = 0;
  Status status_;
};

}  // namespace

// Reads the body back in large pieces, one piece ahead on a helper thread so
// that the device read and the parse overlap; false past its length or on
// error.
class SnapshotReader {
 public:
  SnapshotReader(int fd, uint64_t offset, uint64_t length, uint64_t salt,
                 RecoveryProgress* progress)
      : fd_(fd),
        offset_(offset),
        length_(length),
        hash_(salt),
        progress_(progress),
        buffer_(kSnapshotBuffer),
        spare_(kSnapshotBuffer) {}
  ~SnapshotReader() {
    if (ahead_.valid()) ahead_.wait();  // it writes into spare_
  }
  SnapshotReader(const SnapshotReader&) = delete;
  SnapshotReader& operator=(const SnapshotReader&) = delete;

  bool get(void* out, size_t n) {
    if (consumed_ + n > length_) return false;
    char* p = static_cast<char*>(out);
    while (n > 0) {
      if (pos_ == filled_ && !refill()) return false;
      const size_t take = std::min(n, filled_ - pos_);
      std::memcpy(p, buffer_.data() + pos_, take);
      hash_.update(p, take);
      pos_ += take;
      consumed_ += take;
      p += take;
      n -= take;
    }
    return true;
  }
  bool at_end() const { return consumed_ == length_; }
  uint64_t remaining() const { return length_ - consumed_; }
  uint64_t checksum() const { return hash_.digest(); }

 private:
  bool refill() {
    if (!started_) {
      started_ = true;
      read_ahead();
    }
    if (!ahead_.valid() || !ahead_.get()) return false;
    std::swap(buffer_, spare_);
    filled_ = ahead_bytes_;
    pos_ = 0;
    if (progress_) progress_->bytes_done.fetch_add(filled_);
    read_ahead();
    return true;
  }
  // Starts reading the next piece into spare_ (none past the end).
  void read_ahead() {
    const uint64_t left = align_up(length_) - read_;
    const size_t bytes = static_cast<size_t>(std::min<uint64_t>(left, spare_.size()));
    if (bytes == 0) return;
    const uint64_t at = offset_ + read_;
    read_ += bytes;
    ahead_bytes_ = bytes;
    ahead_ = std::async(std::launch::async, [this, bytes, at] {
      return read_exact(fd_, spare_.data(), bytes, at).is_ok();
    });
  }

  int fd_;
  uint64_t offset_, length_;
  SnapshotHash hash_;
  RecoveryProgress* progress_;
  AlignedBuffer buffer_;  // being parsed
  AlignedBuffer spare_;   // being read into, while ahead_ runs
  size_t pos_ = 0, filled_ = 0, ahead_bytes_ = 0;
  uint64_t read_ = 0, consumed_ = 0;
  bool started_ = false;
  std::future<bool> ahead_;
};

namespace {

bool put_compact(const FlashIndex& index, uint32_t shards, SnapshotWriter& out) {
  const uint32_t geometry[2] = {shards, index.compact_bucket_bits()};
  bool fits = out.put(geometry, sizeof(geometry));
  index.for_each_compact_bucket([&](uint32_t, uint64_t, std::span<const uint8_t> bytes) {
    const auto count = static_cast<uint32_t>(bytes.size() / CompactTable::kEntryBytes);
    fits = fits && out.put(&count, sizeof(count)) && out.put(bytes.data(), bytes.size());
  });
  std::vector<std::pair<uint64_t, int64_t>> expiries;
  index.for_each_compact_expiry(
      [&](uint64_t ident, int64_t ms) { expiries.emplace_back(ident, ms); });
  const uint64_t count = expiries.size();
  fits = fits && out.put(&count, sizeof(count));
  for (const auto& [ident, ms] : expiries) {
    const uint64_t pair[2] = {ident, static_cast<uint64_t>(ms)};
    fits = fits && out.put(pair, sizeof(pair));
  }
  return fits;
}

const char* parse_compact(FlashIndex& index, uint32_t shards, SnapshotReader& in) {
  uint32_t geometry[2];
  if (!in.get(geometry, sizeof(geometry))) return "truncated compact section";
  if (geometry[0] != shards || geometry[1] != index.compact_bucket_bits())
    return "another index geometry";
  const uint64_t buckets = uint64_t{1} << geometry[1];
  for (uint32_t shard = 0; shard < shards; ++shard) {
    for (uint64_t bucket = 0; bucket < buckets; ++bucket) {
      uint32_t count = 0;
      if (!in.get(&count, sizeof(count))) return "truncated compact bucket";
      if (uint64_t{count} * CompactTable::kEntryBytes > in.remaining())
        return "implausible compact bucket";
      // Straight from the read buffer into the bucket's array.
      if (!index.restore_compact_bucket(shard, bucket, count,
                                        [&](uint8_t* dst, size_t n) { return in.get(dst, n); }))
        return "bad compact bucket";
    }
  }
  uint64_t expiries = 0;
  if (!in.get(&expiries, sizeof(expiries)) || expiries > in.remaining() / 16)
    return "bad compact expiries";
  for (uint64_t i = 0; i < expiries; ++i) {
    uint64_t pair[2];
    if (!in.get(pair, sizeof(pair))) return "truncated compact expiries";
    if (!index.restore_compact_expiry(pair[0], static_cast<int64_t>(pair[1])))
      return "expiry of no compact entry";
  }
  return nullptr;
}

}  // namespace

const char* FlashTier::parse_snapshot(SnapshotReader& in) {
  Impl& im = *impl_;
  SnapshotHeader header;
  if (!in.get(&header, sizeof(header))) return "truncated header";
  if (header.magic != kSnapshotMagic || header.format_version < kOldestSnapshotFormat ||
      header.format_version > kSnapshotFormat)
    return "another format";
  if (header.region_count != region_count_) return "another region count";
  if (const char* why = im.regions.restore([&](void* p, size_t n) { return in.get(p, n); },
                                           header.fifo_count, options_.region_size))
    return why;
  for (uint32_t r : im.regions.written()) im.super->saw_seq(im.regions.state(r).seq);
  std::string key;
  std::vector<uint64_t> locations;
  // Each entry takes at least its header and one key byte.
  if (header.entries > in.remaining() / (sizeof(EntryHeader) + 1)) return "implausible entry count";
  for (uint64_t i = 0; i < header.entries; ++i) {
    EntryHeader eh;
    if (!in.get(&eh, sizeof(eh))) return "truncated entry";
    // Lengths are checked against what is left before anything is sized by
    // them: a damaged length must not allocate gigabytes (the checksum is
    // only known at the end).
    if (eh.key_length == 0 || eh.slots > location::kMaxBlocks ||
        eh.key_length + uint64_t{eh.slots} * sizeof(uint64_t) > in.remaining())
      return "implausible entry";
    locations.resize(eh.slots);
    key.resize(eh.key_length);
    if (!in.get(locations.data(), locations.size() * sizeof(uint64_t)) ||
        !in.get(key.data(), key.size()))
      return "truncated entry";
    im.index.restore({key, eh.version, eh.object_size, eh.expire_at_ms, locations});
  }
  if (header.format_version >= kFirstCompactFormat) {
    if (const char* why = parse_compact(im.index, Impl::kIndexShards, in)) return why;
  }
  if (!in.at_end()) return "trailing bytes";
  im.regions.finish_restore();
  recovered_max_version_ = header.max_version;
  return nullptr;
}

Status FlashTier::write_snapshot() {
  Impl& im = *impl_;
  stop_reclaimer();  // no relocation may be half done
  flush();
  const uint64_t start = mono_ns();
  MutexLock lock(im.write_mu);
  while (!(im.log.idle() && im.deferred_meta.empty())) im.log.wait(im.write_mu);
  SnapshotWriter out(im.fd.get(), layout_.snapshot_offset, layout_.snapshot_bytes, salt());
  SnapshotHeader header;
  header.region_count = region_count_;
  header.fifo_count = static_cast<uint32_t>(im.regions.written().size());
  header.entries = im.index.object_count() - im.index.compact_count();
  header.max_version = std::max(recovered_max_version_, im.max_version_seen.load());
  bool fits = out.put(&header, sizeof(header));
  fits = fits && im.regions.persist([&](const void* p, size_t n) { return out.put(p, n); });
  uint64_t entries = 0;
  im.index.for_each_entry([&](const EntryImage& e) {
    EntryHeader eh{static_cast<uint32_t>(e.key.size()), static_cast<uint32_t>(e.locations.size()),
                   e.version, e.object_size, e.expire_at_ms};
    fits = fits && out.put(&eh, sizeof(eh)) &&
           out.put(e.locations.data(), e.locations.size_bytes()) &&
           out.put(e.key.data(), e.key.size());
    ++entries;
  });
  fits = fits && put_compact(im.index, Impl::kIndexShards, out);
  Status st = out.finish();
  if (!fits || !st.is_ok() || entries != header.entries) {
    spdlog::warn("flash: no index snapshot written ({}); the next start scans",
                 !st.is_ok() ? st.to_string() : "it does not fit in the snapshot area");
    return st.is_ok() ? Status::too_large("index snapshot does not fit") : st;
  }
  if (::fdatasync(im.fd.get()) != 0) {
    return Status::io_error(std::string("flash: fdatasync of the snapshot: ") +
                            std::strerror(errno));
  }
  TIERKV_RETURN_IF_ERROR(im.super->record_snapshot(out.length(), out.checksum()));
  im.snapshot_on_device = true;
  spdlog::info("flash: index snapshot of {} objects ({} bytes) written in {:.1f} ms", entries,
               out.length(), (mono_ns() - start) / 1e6);
  return Status::ok();
}

// Called (under write_mu) before the first record after a snapshot.
Status FlashTier::drop_snapshot_locked() {
  Impl& im = *impl_;
  im.write_mu.assert_held();
  if (!im.snapshot_on_device) return Status::ok();
  TIERKV_RETURN_IF_ERROR(im.super->drop_snapshot());
  im.snapshot_on_device = false;
  return Status::ok();
}

// True if the index and the region state came from the snapshot. Else the
// tier is left empty for the scan, and the log says why.
bool FlashTier::load_snapshot() {
  Impl& im = *impl_;
  const Superblock& sb = im.super->current();
  if (sb.snapshot_length == 0) {
    spdlog::info("flash: no index snapshot (the last stop was not clean): scanning");
    return false;
  }
  if (sb.snapshot_length > layout_.snapshot_bytes) {
    spdlog::warn("flash: index snapshot larger than its area: scanning");
    return false;
  }
  RecoveryProgress* progress = options_.progress;
  if (progress) {
    progress->from_snapshot.store(true);
    progress->bytes_total.store(align_up(sb.snapshot_length));
  }
  SnapshotReader in(im.fd.get(), layout_.snapshot_offset, sb.snapshot_length, salt(), progress);
  const char* why = parse_snapshot(in);
  if (why == nullptr && in.checksum() != sb.snapshot_checksum) why = "checksum mismatch";
  if (why == nullptr) return true;
  spdlog::warn("flash: index snapshot rejected ({}): scanning", why);
  im.index.clear();
  im.regions.reset(region_count_);
  im.super->forget_seqs();
  if (progress) {
    progress->from_snapshot.store(false);
    progress->bytes_done.store(0);
  }
  return false;
}

}  // namespace tierkv::flash
