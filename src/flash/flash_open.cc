// FlashTier: opening the device, recovering the index, starting the engine,
// and shutting down.
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/hash.h"
#include "flash/exact_io.h"
#include "flash/flash_tier.h"
#include "flash/flash_tier_internal.h"
#include "flash/record.h"

namespace tierkv::flash {

FlashMetrics::FlashMetrics(MetricsRegistry& r)
    : bytes_used(r.gauge("tierkv_flash_bytes_used", "Bytes written in live flash regions")),
      bytes_free(r.gauge("tierkv_flash_bytes_free", "Flash bytes not in live regions")),
      records(r.gauge("tierkv_flash_records", "Chunk records indexed on flash")),
      objects(r.gauge("tierkv_flash_objects", "Objects with chunks on flash")),
      regions(r.gauge("tierkv_flash_regions", "Flash regions")),
      regions_used(r.gauge("tierkv_flash_regions_used", "Flash regions holding data")),
      index_bytes(r.gauge("tierkv_flash_index_bytes", "DRAM used by the flash index")),
      write_amplification_permille(r.gauge("tierkv_flash_write_amplification_permille",
                                           "Device bytes written per 1000 user bytes")),
      reclaims(r.counter("tierkv_flash_reclaims_total", "Flash regions reclaimed")),
      reclaim_index_walks(r.counter("tierkv_flash_reclaim_index_walks_total",
                                    "Reclaims that walked the whole index (no reclaimer list)")),
      reclaim_region_reads(
          r.counter("tierkv_flash_reclaim_region_reads_total",
                    "Reclaimer rounds that read their region to find its chunks, not walking "
                    "the index")),
      regions_draining(r.gauge("tierkv_flash_regions_draining",
                               "Reclaimed regions that reads in progress still pin")),
      reinsertions(r.counter("tierkv_flash_reinsertions_total", "Chunks reinserted on reclaim")),
      reads(r.counter("tierkv_flash_reads_total", "Chunk reads from the device")),
      page_cache_reads(r.counter("tierkv_flash_page_cache_reads_total",
                                 "Chunk reads copied from the page cache on the asking thread")),
      read_bytes(r.counter("tierkv_flash_read_bytes_total", "Chunk data bytes read")),
      read_misses(r.counter("tierkv_flash_read_misses_total", "Reads of chunks not indexed")),
      read_races(
          r.counter("tierkv_flash_read_races_total", "Reads that lost their region to reclaim")),
      read_latency(r.latency("tierkv_flash_read_latency", "Chunk read latency")),
      device_write_bytes(r.counter("tierkv_flash_write_bytes_total",
                                   "Bytes written to the device (headers, padding)")),
      user_write_bytes(
          r.counter("tierkv_flash_user_write_bytes_total", "Chunk data bytes written by callers")),
      checksum_failures(
          r.counter("tierkv_flash_checksum_failures_total", "Reads that failed verification")),
      key_collisions(r.counter("tierkv_flash_key_collisions_total",
                               "Reads that found another key's record: a shared hash ident")),
      write_errors(r.counter("tierkv_flash_write_errors_total", "Failed device writes")),
      read_errors(r.counter("tierkv_flash_read_errors_total", "Failed device reads")),
      recovered_records(
          r.counter("tierkv_flash_recovered_records_total", "Chunk records recovered at open")),
      recovery_dropped_records(r.counter("tierkv_flash_recovery_dropped_records_total",
                                         "Torn or corrupt records dropped at open")),
      fsyncs(r.counter("tierkv_flash_fsyncs_total", "fdatasync calls that succeeded")) {}

std::string_view fsync_policy_name(FsyncPolicy policy) {
  switch (policy) {
    case FsyncPolicy::kNone:
      return "none";
    case FsyncPolicy::kEverySec:
      return "everysec";
    case FsyncPolicy::kAlways:
      return "always";
  }
  return "?";
}

Result<FsyncPolicy> parse_fsync_policy(std::string_view text) {
  if (text == "none" || text == "no") return FsyncPolicy::kNone;
  if (text == "everysec") return FsyncPolicy::kEverySec;
  if (text == "always") return FsyncPolicy::kAlways;
  return Status::invalid_argument("fsync policy must be none, everysec or always");
}

Status read_exact(int fd, char* buf, uint64_t length, uint64_t offset) {
  uint64_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd, buf + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::io_error(std::string("flash read: ") + std::strerror(errno));
    if (n == 0) return Status::io_error("flash read: unexpected end of file");
    done += static_cast<uint64_t>(n);
  }
  return Status::ok();
}

Status write_exact(int fd, const char* buf, uint64_t length, uint64_t offset) {
  uint64_t done = 0;
  while (done < length) {
    const ssize_t n = ::pwrite(fd, buf + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::io_error(std::string("flash write: ") + std::strerror(errno));
    done += static_cast<uint64_t>(n);
  }
  return Status::ok();
}

namespace {

std::string errno_text(const std::string& what, const std::string& path, int err) {
  return what + " " + path + ": " + std::strerror(err);
}

}  // namespace

FlashTier::FlashTier(const FlashOptions& options, MetricsRegistry* metrics) : options_(options) {
  if (metrics == nullptr) {
    owned_metrics_ = std::make_unique<MetricsRegistry>();
    metrics = owned_metrics_.get();
  }
  impl_ = std::make_unique<Impl>(
      *metrics,
      LogWriter::Options{.region_size = options.region_size,
                         .write_buffer_size = options.write_buffer_size,
                         .max_write_inflight = options.max_write_inflight,
                         .fsync_always = options.fsync == FsyncPolicy::kAlways},
      options.size / Impl::kBytesPerExpectedObject, options.index_hash_mask_for_test);
  impl_->index.set_key_reader([this](uint64_t loc) { return read_key_at(loc); });
}

Result<std::unique_ptr<FlashTier>> FlashTier::open(const FlashOptions& options,
                                                   MetricsRegistry* metrics) {
  if (options.path.empty()) return Status::invalid_argument("flash: empty path");
  if (options.region_size % kBlockSize != 0 || options.region_size < 16 * kBlockSize ||
      options.region_size > (uint64_t{1} << 30)) {
    return Status::invalid_argument(
        "flash: region size must be a multiple of 4 KiB in [64 KiB, 1 GiB]");
  }
  if (options.write_buffer_size == 0 || options.write_buffer_size % kBlockSize != 0) {
    return Status::invalid_argument("flash: write buffer size must be a multiple of 4 KiB");
  }
  if (options.queue_depth == 0 || options.max_write_inflight == 0) {
    return Status::invalid_argument("flash: queue depth and write slots must be positive");
  }
  if (!(options.snapshot_area > 0 && options.snapshot_area <= kMaxSnapshotFraction)) {
    return Status::invalid_argument("flash: the snapshot area must be a share in (0, 0.5]");
  }
  std::unique_ptr<FlashTier> tier(new FlashTier(options, metrics));
  TIERKV_RETURN_IF_ERROR(tier->open_device());
  tier->detect_io_alignment();
  TIERKV_RETURN_IF_ERROR(tier->recover());
  TIERKV_RETURN_IF_ERROR(tier->start_engine());
  return tier;
}

FlashFile flash_file(const std::string& configured_path) {
  FlashFile f{configured_path, {}, false};
  struct stat st {};
  const bool exists = ::stat(f.path.c_str(), &st) == 0;
  if ((exists && S_ISDIR(st.st_mode)) || f.path.ends_with('/')) {
    while (f.path.size() > 1 && f.path.ends_with('/')) f.path.pop_back();
    f.folder = f.path;
    f.path += "/flash.dat";
  }
  f.block_device = ::stat(f.path.c_str(), &st) == 0 && S_ISBLK(st.st_mode);
  return f;
}

Status FlashTier::open_device() {
  const FlashFile file = flash_file(options_.path);
  if (!file.folder.empty() && ::mkdir(file.folder.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::io_error(errno_text("flash: cannot create directory", file.folder, errno));
  }
  const std::string& path = file.path;
  file_path_ = path;
  const bool block_device = file.block_device;
  const int flags = O_RDWR | O_CLOEXEC | (block_device ? 0 : O_CREAT);
  int fd = -1;
  if (options_.direct_io) {
    fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
    if (fd >= 0) {
      // Some file systems accept O_DIRECT at open and refuse it at I/O time.
      AlignedBuffer probe(kBlockSize);
      if (::pread(fd, probe.data(), kBlockSize, 0) < 0 && errno == EINVAL) {
        ::close(fd);
        fd = -1;
      }
    } else if (errno != EINVAL) {
      return Status::io_error(errno_text("flash: cannot open", path, errno));
    }
    if (fd < 0) spdlog::info("flash: {} does not support O_DIRECT; using buffered I/O", path);
  }
  direct_io_ = fd >= 0;
  if (fd < 0) fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return Status::io_error(errno_text("flash: cannot open", path, errno));
  impl_->fd = UniqueFd(fd);

  uint64_t size = options_.size;
  if (block_device) {
    uint64_t device_bytes = 0;
    if (::ioctl(fd, BLKGETSIZE64, &device_bytes) != 0) {
      return Status::io_error(errno_text("flash: cannot size device", path, errno));
    }
    size = std::min(size, device_bytes);
  }
  const Layout layout = plan_layout(size, options_.region_size, options_.snapshot_area);
  const uint64_t regions = layout.regions;
  if (regions < 2) {
    return Status::invalid_argument("flash: size " + std::to_string(size) +
                                    " holds fewer than 2 regions of " +
                                    std::to_string(options_.region_size) + " bytes");
  }
  if (regions > location::kMaxRegion) return Status::invalid_argument("flash: too many regions");
  region_count_ = static_cast<uint32_t>(regions);
  layout_ = layout;
  const uint64_t bytes = layout.total;
  if (block_device) return Status::ok();

  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::io_error(errno_text("flash: cannot stat", path, errno));
  if (options_.preallocate) {
    // Check first: a fallocate that runs out of space part-way fills the disk.
    struct statvfs vfs {};
    const uint64_t allocated = static_cast<uint64_t>(st.st_blocks) * 512;
    if (::fstatvfs(fd, &vfs) == 0 && bytes > allocated &&
        bytes - allocated > uint64_t{vfs.f_bavail} * vfs.f_frsize) {
      return Status::io_error("flash: no space left on the device for " + std::to_string(bytes) +
                              " bytes at " + path + " (ENOSPC)");
    }
    if (::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) == 0) return Status::ok();
    if (errno != EOPNOTSUPP && errno != ENOSYS) {
      return Status::io_error(errno_text(
          "flash: cannot allocate " + std::to_string(bytes) + " bytes for", path, errno));
    }
  }
  if (static_cast<uint64_t>(st.st_size) < bytes &&
      ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return Status::io_error(errno_text("flash: cannot size", path, errno));
  }
  return Status::ok();
}

// Reads transfer the record rounded up to this, not to its 4 KiB extent. The
// kernel says it (statx STATX_DIOALIGN, 6.1+); else a block device's logical
// sector; else a 512-byte O_DIRECT read settles it. Anything but a power of
// two up to 4 KiB falls back to 4 KiB, which every device here accepts.
void FlashTier::detect_io_alignment() {
  if (!direct_io_) {
    io_alignment_ = 1;
    return;
  }
  const int fd = impl_->fd.get();
  uint64_t align = 0;
#ifdef STATX_DIOALIGN
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) &&
      sx.stx_dio_mem_align <= kBlockSize) {
    align = sx.stx_dio_offset_align;
  }
#endif
  struct stat st {};
  if (align == 0 && ::fstat(fd, &st) == 0 && S_ISBLK(st.st_mode)) {
    int sector = 0;
    if (::ioctl(fd, BLKSSZGET, &sector) == 0 && sector > 0) align = static_cast<uint64_t>(sector);
  }
  if (align == 0) {
    AlignedBuffer probe(kBlockSize);
    align = ::pread(fd, probe.data(), 512, 0) >= 0 ? 512 : kBlockSize;
  }
  const bool usable = align >= 512 && align <= kBlockSize && (align & (align - 1)) == 0;
  io_alignment_ = static_cast<uint32_t>(usable ? align : kBlockSize);
}

Status FlashTier::start_engine() {
  Impl& im = *impl_;
  IoEngineOptions eo;
  eo.fd = im.fd.get();
  eo.queue_depth = options_.queue_depth + options_.max_write_inflight;
  eo.read_latency_ns = options_.backing_latency_ns;
  eo.read_bandwidth = options_.backing_bandwidth;
  if (options_.io_backend != IoBackend::kThreadPool) {
    Result<std::unique_ptr<IoEngine>> uring = make_uring_engine(eo);
    if (uring.is_ok()) {
      im.engine = std::move(*uring);
    } else if (options_.io_backend == IoBackend::kUring) {
      return uring.status();
    } else {
      spdlog::warn("flash: io_uring unavailable ({}); using a pread/pwrite thread pool",
                   uring.status().message());
    }
  }
  if (!im.engine) im.engine = make_thread_pool_engine(eo);
  if (options_.wrap_engine) im.engine = options_.wrap_engine(std::move(im.engine));
  // A read model and a wrapped engine must see every read.
  const bool page_cache = options_.page_cache_reads && !direct_io_ &&
                          options_.backing_latency_ns == 0 && options_.backing_bandwidth == 0 &&
                          !options_.wrap_engine;
  im.reader =
      std::make_unique<ChunkReader>(ChunkReader::Options{.queue_depth = options_.queue_depth,
                                                         .io_alignment = io_alignment_,
                                                         .region_size = options_.region_size,
                                                         .salt = salt(),
                                                         .buffer_pool = options_.buffer_pool,
                                                         .page_cache_fd = page_cache ? eo.fd : -1},
                                    *im.engine, im.index, im.metrics, im.reclaim_epoch);
  {
    MutexLock lock(im.write_mu);  // nothing runs yet; the analysis wants it
    // Buffered I/O takes any alignment; 512 keeps batches whole sectors.
    im.log.start(*im.engine, salt(), std::max<uint32_t>(io_alignment_, 512),
                 [this](WriteBatch* batch, int64_t result) { on_write_done(batch, result); });
  }
  start_reclaimer();
  spdlog::info("flash: {} ({} regions of {} KiB) via {}, {} I/O, fsync {}", file_path_,
               region_count_, options_.region_size >> 10, im.engine->name(),
               direct_io_ ? fmt::format("direct (align {})", io_alignment_) : "buffered",
               fsync_policy_name(options_.fsync));
  if (options_.fsync == FsyncPolicy::kEverySec) {
    im.device_sync.start_every_second(im.fd.get(), [this] { release_lazy_records(); });
  }
  return Status::ok();
}

FlashTier::~FlashTier() {
  Impl& im = *impl_;
  stop_reclaimer();
  if (im.engine) {
    flush();
    wait_reads_idle();
  }
  im.device_sync.stop();
  im.engine.reset();  // joins the I/O threads: no callback runs after this
  // After the engine: a completion thread may still be inside the reader
  // (waking a verifier) when the last read's callback, on that verifier,
  // lets wait_reads_idle() return.
  im.reader.reset();  // stops its verifier threads
  if (options_.fsync != FsyncPolicy::kNone && im.fd.get() >= 0) ::fdatasync(im.fd.get());
}

}  // namespace tierkv::flash
