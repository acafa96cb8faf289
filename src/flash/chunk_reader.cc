#include "flash/chunk_reader.h"

#include <spdlog/spdlog.h>

#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "flash/record.h"

namespace tierkv::flash {
namespace {

// Reads at least this long are verified on a verifier thread while other
// reads are in flight. At 64 KiB the hand-off (a wake-up, 10-30 µs on a
// busy machine) costs more than the hash (~4 µs); alone in flight (QD1), a
// read gains nothing from it either.
constexpr uint64_t kOffloadVerifyBytes = 256 * 1024;
constexpr unsigned kVerifierThreads = 2;

}  // namespace

void ChunkRead::on_complete(int64_t result) {
  reader->on_done(this, result);
}

ChunkReader::ChunkReader(const Options& options, IoEngine& engine, FlashIndex& index,
                         FlashMetrics& metrics, const std::atomic<uint64_t>& reclaim_epoch)
    : options_(options),
      engine_(engine),
      index_(index),
      metrics_(metrics),
      reclaim_epoch_(reclaim_epoch),
      offload_verify_(engine.name() == "io_uring") {
  if (!offload_verify_) return;
  for (unsigned i = 0; i < kVerifierThreads; ++i)
    verifiers_.emplace_back([this] { run_verifier(); });
}

ChunkReader::~ChunkReader() {
  {
    MutexLock lock(verify_mu_);
    verify_stop_ = true;
  }
  verify_cv_.notify_all();
  for (std::thread& t : verifiers_) t.join();
}

std::unique_ptr<ChunkRead> ChunkReader::prepare(std::string_view key, uint64_t key_hash,
                                                uint32_t chunk_index, const IndexedChunk& found,
                                                uint64_t epoch) {
  auto read = std::make_unique<ChunkRead>();
  read->reader = this;
  read->key.assign(key);
  read->key_hash = key_hash;
  read->chunk_index = chunk_index;
  read->version = found.version;
  read->location = found.location;
  read->reclaim_epoch = epoch;
  read->expire_at_ms = found.expire_at_ms;
  read->start_ns = mono_ns();
  const location::ReadSpan span = location::read_span(found.location, options_.io_alignment);
  read->buffer = BufferPool::take_from(options_.buffer_pool, span.length);
  read->op = IoRequest::Op::kRead;
  read->buf = read->buffer.data();
  read->length = span.length;
  read->skew = span.skew;
  read->offset = region_offset(location::region(found.location), options_.region_size) + span.start;
  return read;
}

void ChunkReader::submit(std::span<std::unique_ptr<ChunkRead>> reads) {
  std::vector<IoRequest*> now;
  {
    MutexLock lock(mu_);
    outstanding_ += reads.size();
  }
  size_t cached = 0;
  for (std::unique_ptr<ChunkRead>& r : reads) {
    if (!read_from_page_cache(*r)) continue;
    const auto length = static_cast<int64_t>(r->length);
    complete(r.release(), length);
    ++cached;
  }
  if (cached == reads.size()) return;
  {
    MutexLock lock(mu_);
    for (std::unique_ptr<ChunkRead>& r : reads) {
      if (!r) continue;
      const bool demand = r->priority == ReadPriority::kDemand;
      (demand ? demand_queue_ : background_queue_).push_back(r.release());
    }
    take_queued_locked(now);
  }
  if (!now.empty()) engine_.submit(now);
}

bool ChunkReader::read_from_page_cache(ChunkRead& read) {
  if (options_.page_cache_fd < 0 || read.priority != ReadPriority::kDemand) return false;
  iovec part{read.buf, read.length};
  const ssize_t n =
      preadv2(options_.page_cache_fd, &part, 1, static_cast<off_t>(read.offset), RWF_NOWAIT);
  // EAGAIN (not all cached) or short: the engine reads it whole.
  if (n != static_cast<ssize_t>(read.length)) return false;
  metrics_.page_cache_reads.add();
  return true;
}

void ChunkReader::take_queued_locked(std::vector<IoRequest*>& out) {
  const uint32_t background_cap = std::max<uint32_t>(options_.queue_depth / 2, 1);
  while (in_flight_ < options_.queue_depth) {
    ChunkRead* read = nullptr;
    if (!demand_queue_.empty()) {
      read = demand_queue_.front();
      demand_queue_.pop_front();
    } else if (!background_queue_.empty() && background_in_flight_ < background_cap) {
      read = background_queue_.front();
      background_queue_.pop_front();
      ++background_in_flight_;
    } else {
      break;
    }
    ++in_flight_;
    out.push_back(read);
  }
}

void ChunkReader::on_done(ChunkRead* raw, int64_t result) {
  std::unique_ptr<ChunkRead> read(raw);
  std::vector<IoRequest*> next;  // keep the device busy before the callback
  bool others_in_flight = false;
  {
    MutexLock lock(mu_);
    --in_flight_;
    if (read->priority == ReadPriority::kBackground) --background_in_flight_;
    take_queued_locked(next);
    others_in_flight = in_flight_ > 0;
  }
  if (!next.empty()) engine_.submit(next);
  const bool background = read->priority == ReadPriority::kBackground;
  if (offload_verify_ &&
      (background || (others_in_flight && read->length >= kOffloadVerifyBytes))) {
    {
      MutexLock lock(verify_mu_);
      (background ? verify_background_ : verify_demand_).emplace_back(read.release(), result);
    }
    verify_cv_.notify_one();
    return;
  }
  complete(read.release(), result);
}

void ChunkReader::wait_idle() {
  MutexLock lock(mu_);
  while (outstanding_ != 0) idle_.wait(mu_);
}

void ChunkReader::complete(ChunkRead* raw, int64_t result) {
  std::unique_ptr<ChunkRead> read(raw);
  Result<FlashChunk> chunk = verify(*read, result);
  metrics_.read_latency.record(mono_ns() - read->start_ns);
  read->done(std::move(chunk));
  read.reset();
  MutexLock lock(mu_);
  if (--outstanding_ == 0) idle_.notify_all();
}

void ChunkReader::run_verifier() {
  MutexLock lock(verify_mu_);
  while (true) {
    while (!verify_stop_ && verify_demand_.empty() && verify_background_.empty()) {
      verify_cv_.wait(verify_mu_);
    }
    auto& queue = verify_demand_.empty() ? verify_background_ : verify_demand_;
    if (queue.empty()) return;  // stopping, and nothing left
    auto [read, result] = queue.front();
    queue.pop_front();
    lock.unlock();
    complete(read, result);
    lock.lock();
  }
}

Result<FlashChunk> ChunkReader::verify(ChunkRead& read, int64_t result) {
  metrics_.reads.add();
  if (result < 0) {
    metrics_.read_errors.add();
    spdlog::error("flash: read at offset {} failed: {}", read.offset,
                  std::strerror(static_cast<int>(-result)));
    return Status::io_error(std::string("flash read: ") + std::strerror(static_cast<int>(-result)));
  }
  Result<RecordView> rec = decode_record(read.buffer.data() + read.skew, read.length - read.skew,
                                         {options_.salt, read.offset + read.skew});
  const bool matches = rec.is_ok() && rec->key == read.key &&
                       rec->header.chunk_index == read.chunk_index &&
                       rec->header.object_version == read.version;
  if (!matches) {
    if (reclaim_epoch_.load(std::memory_order_acquire) != read.reclaim_epoch) {
      metrics_.read_races.add();
      return Status::not_found("flash region reclaimed during the read");
    }
    if (rec.is_ok() && rec->key != read.key) {
      // A compact entry names its object by a hash ident, and another key's
      // ident matched: that entry is the other key's, not damage.
      metrics_.key_collisions.add();
      return Status::not_found("flash entry belongs to another key");
    }
    metrics_.checksum_failures.add();
    spdlog::warn("flash: record for chunk {} of a {}-byte key at offset {} failed verification: {}",
                 read.chunk_index, read.key.size(), read.offset,
                 rec.is_ok() ? "identity mismatch" : rec.status().message());
    index_.drop_chunk(read.key, read.key_hash, read.chunk_index, read.location);
    return Status::not_found("flash record failed verification");
  }
  metrics_.read_bytes.add(rec->data.size());
  const auto data_offset = static_cast<uint32_t>(rec->data.data() - read.buffer.data());
  const auto data_length = static_cast<uint32_t>(rec->data.size());
  const uint64_t object_size = rec->header.object_size;
  return FlashChunk(std::move(read.buffer), data_offset, data_length, read.chunk_index,
                    read.version, object_size, read.expire_at_ms);
}

}  // namespace tierkv::flash
