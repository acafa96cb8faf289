#include "store/flashio/flash_reader.h"

#include <fmt/format.h>

#include <absl/container/inlined_vector.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "core/mutex.h"

namespace tierkv {

// --- one read ---

class FlashReader::Op : public FlashRead, public std::enable_shared_from_this<Op> {
 public:
  Op(FlashReader& reader, std::string_view key, const flash::FlashObjectSummary& info,
     uint64_t offset, uint64_t length, ReadWindow window, FlashReadCallbacks callbacks,
     std::optional<memory::ObjectWriter> copy, OnCopied on_copied,
     std::vector<memory::ChunkPin> resident,
     std::optional<flash::FlashTier::VersionLocations> where, bool background);

  void pump();
  void cancel() override;
  // See FlashReader::follow.
  std::shared_ptr<FlashRead> follow(uint64_t offset, uint64_t length,
                                    FlashReadCallbacks& callbacks);
  uint32_t chunks_held() const override {
    MutexLock lock(mu_);
    return held_;
  }
  uint64_t chunks_issued() const override {
    MutexLock lock(mu_);
    return issued_;
  }

 private:
  // A chunk handed to the consumer: dropping the last reference to it gives
  // its buffer back (or its memory pin) and lets the read go on.
  struct Piece {
    Piece(std::optional<flash::FlashChunk> c, memory::ChunkPin pin, int64_t bytes,
          std::shared_ptr<Op> owner)
        : chunk(std::move(c)), in_memory(std::move(pin)), charge(bytes), op(std::move(owner)) {}
    Piece(const Piece&) = delete;
    Piece& operator=(const Piece&) = delete;
    std::string_view data() const { return chunk ? chunk->data() : in_memory.bytes(); }
    std::optional<flash::FlashChunk> chunk;
    memory::ChunkPin in_memory;
    int64_t charge;
    std::shared_ptr<Op> op;
    ~Piece() { op->released(charge); }
  };
  // A chunk waiting to be handed out: read from flash, or held in memory.
  struct Slot {
    int64_t charge = 0;
    std::optional<flash::FlashChunk> chunk;
    memory::ChunkPin in_memory;
    bool in_copy = false;  // the promotion's writer holds these bytes already
    bool ready() const { return chunk.has_value() || !in_memory.empty(); }
    void reset() {
      chunk.reset();
      in_memory = {};
      in_copy = false;
    }
  };

  // A second consumer of this read's copy: a read of the key that came
  // while the promotion was under way. It gets the writer's chunks of its
  // range in order, each once this read has handed it out (then the writer
  // holds its bytes), and holds no read budget: its pieces pin memory chunks.
  struct Follower {
    uint64_t offset;
    uint64_t length;
    uint32_t next;  // the next chunk to hand out
    uint32_t last;
    FlashReadCallbacks callbacks;
    bool cancelled = false;
    bool ended = false;
  };
  class FollowerHandle;
  void unfollow(const std::shared_ptr<Follower>& follower);
  // Hands followers the chunks delivered so far, and ends those served in
  // full or cancelled. Runs as part of deliver(); may unlock.
  void serve_followers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Slot& slot(uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ring_[(index - first_) % ring_.size()];
  }
  uint64_t expected_length(uint32_t index) const {
    uint64_t start = uint64_t{index} * chunk_size_;
    return std::min<uint64_t>(chunk_size_, object_size_ - std::min(object_size_, start));
  }
  // What a chunk's buffer is charged: its data, rounded to the device's
  // alignment, plus one block for its record header (never above the cap).
  int64_t charge_for(uint32_t index) const;
  // The part of chunk `index` inside the requested range.
  std::string_view slice(uint32_t index, std::string_view data) const;
  void on_chunk(uint32_t index, Result<flash::FlashChunk> chunk);
  // Puts chunk `index` in its slot from resident_, if memory holds it.
  bool take_resident(uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void copy_chunk(uint32_t index, std::string_view data) {
    if (char* to = copy_->chunk_data(index)) {
      std::memcpy(to, data.data(), data.size());
      reader_.bytes_copied_.add(static_cast<int64_t>(data.size()));
    }
    copy_->advance(data.size());
  }
  // Puts a chunk read from flash into the promotion's writer: its buffer
  // becomes the memory chunk where it can (no copy), and the slot then hands
  // out the memory chunk.
  void fill_copy(uint32_t index, Slot& s, flash::FlashChunk& chunk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void granted(int64_t charge);
  void released(int64_t charge);
  // Hands out the chunks that are next in order; may unlock while the
  // consumer runs. One thread delivers at a time.
  void deliver() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void deliver_in_order() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the read (on_done) once it is complete or stopped with nothing in
  // flight. Returns unlocked: its callers lock mu_ by hand, since a
  // MutexLock cannot be handed a release the analysis follows (clang 14).
  void maybe_finish() ABSL_UNLOCK_FUNCTION(mu_);

  FlashReader& reader_;
  const std::string key_;
  const uint64_t version_;
  const uint64_t object_size_;
  const uint64_t chunk_size_;
  const uint64_t offset_;
  const uint64_t length_;
  const uint32_t first_;
  const uint32_t last_;
  const uint32_t depth_;
  const uint32_t parallel_;
  FlashReadCallbacks callbacks_;
  std::optional<flash::FlashTier::VersionLocations> known_;
  std::optional<memory::ObjectWriter> copy_;
  OnCopied on_copied_;
  mutable Mutex mu_;
  // Chunks of the range memory holds (entry i: chunk first_ + i), for an
  // object held in part: they are handed out without a device read.
  std::vector<memory::ChunkPin> resident_ ABSL_GUARDED_BY(mu_);
  std::vector<Slot> ring_ ABSL_GUARDED_BY(mu_);
  uint32_t next_issue_ ABSL_GUARDED_BY(mu_);
  uint32_t next_deliver_ ABSL_GUARDED_BY(mu_);
  uint32_t held_ ABSL_GUARDED_BY(mu_) = 0;      // issued and not yet released by the consumer
  uint32_t inflight_ ABSL_GUARDED_BY(mu_) = 0;  // issued and not yet completed
  uint64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t prepaid_ ABSL_GUARDED_BY(mu_) = 0;  // budget held for the next chunk (granted, or kept)
  bool waiting_budget_ ABSL_GUARDED_BY(mu_) = false;
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  bool redeliver_ ABSL_GUARDED_BY(mu_) = false;  // more to hand out came while delivering_
  // Their fields too are guarded by mu_ (a nested struct cannot name it).
  std::vector<std::shared_ptr<Follower>> followers_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // error or cancel: nothing more is issued
  // Issued as background reads until a reader follows (then it waits).
  std::atomic<bool> background_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  Status error_ ABSL_GUARDED_BY(mu_);
};

FlashReader::Op::Op(FlashReader& reader, std::string_view key,
                    const flash::FlashObjectSummary& info, uint64_t offset, uint64_t length,
                    ReadWindow window, FlashReadCallbacks callbacks,
                    std::optional<memory::ObjectWriter> copy, OnCopied on_copied,
                    std::vector<memory::ChunkPin> resident,
                    std::optional<flash::FlashTier::VersionLocations> where, bool background)
    : reader_(reader),
      key_(key),
      version_(info.version),
      object_size_(info.object_size),
      chunk_size_(reader.chunk_size_),
      offset_(offset),
      length_(length),
      first_(static_cast<uint32_t>(offset / chunk_size_)),
      last_(length == 0 ? first_ : static_cast<uint32_t>((offset + length - 1) / chunk_size_)),
      depth_(std::max<uint32_t>(window.depth, 1)),
      parallel_(std::max<uint32_t>(window.parallel, 1)),
      callbacks_(std::move(callbacks)),
      copy_(std::move(copy)),
      on_copied_(std::move(on_copied)),
      resident_(std::move(resident)),
      ring_(std::min<uint64_t>(depth_, uint64_t{last_} - first_ + 1)),
      next_issue_(first_),
      next_deliver_(first_),
      background_(background) {
  // An overwrite while the read runs must not cut it short: the chunks it
  // has not issued yet stay where they were (FlashTier::locate_version).
  // One chunk needs no region pins: nothing is sent before it is read.
  known_ = where ? std::move(where)
                 : reader.flash_.locate_version(key_, version_,
                                                last_ > first_ ? flash::FlashTier::Pinning::kPin
                                                               : flash::FlashTier::Pinning::kNone);
}

int64_t FlashReader::Op::charge_for(uint32_t index) const {
  constexpr int64_t kBlock = 4096;
  int64_t data = static_cast<int64_t>(expected_length(index));
  int64_t bytes = (data + kBlock - 1) / kBlock * kBlock + kBlock;
  return std::min(bytes, reader_.budget_.limit());
}

std::string_view FlashReader::Op::slice(uint32_t index, std::string_view data) const {
  uint64_t start = uint64_t{index} * chunk_size_;
  uint64_t from = offset_ > start ? offset_ - start : 0;
  uint64_t end = std::min<uint64_t>(offset_ + length_ - start, data.size());
  return from >= end ? std::string_view{} : data.substr(from, end - from);
}

bool FlashReader::Op::take_resident(uint32_t index) {
  if (resident_.empty() || resident_[index - first_].empty()) return false;
  slot(index).in_memory = std::move(resident_[index - first_]);
  ++held_;
  return true;
}

void FlashReader::Op::pump() {
  absl::InlinedVector<uint32_t, 8> batch;
  {
    mu_.lock();  // by hand: maybe_finish() returns unlocked
    bool from_memory = false;
    while (!stopped_ && next_issue_ <= last_ && held_ < depth_ && inflight_ < parallel_) {
      if (take_resident(next_issue_)) {
        ++next_issue_;
        from_memory = true;
        continue;
      }
      int64_t charge = prepaid_;
      if (charge == 0) {
        if (waiting_budget_) break;
        charge = charge_for(next_issue_);
        auto self = shared_from_this();
        if (!reader_.budget_.acquire(charge, [self, charge] { self->granted(charge); })) {
          waiting_budget_ = true;
          break;
        }
      }
      prepaid_ = 0;
      slot(next_issue_).charge = charge;
      ++held_;
      ++inflight_;
      ++issued_;
      batch.push_back(next_issue_++);
    }
    if (from_memory) {
      deliver();
      // With device reads in the batch, their completions end the read.
      if (batch.empty()) return maybe_finish();
    }
    mu_.unlock();
  }
  if (batch.empty()) return;
  auto self = shared_from_this();
  reader_.flash_.read_chunks(
      key_, batch, version_,
      [self](uint32_t index, Result<flash::FlashChunk> chunk) {
        self->on_chunk(index, std::move(chunk));
      },
      known_ ? &*known_ : nullptr,
      background_.load(std::memory_order_relaxed) ? flash::ReadPriority::kBackground
                                                  : flash::ReadPriority::kDemand);
}

void FlashReader::Op::granted(int64_t charge) {
  bool wanted;
  {
    MutexLock lock(mu_);
    waiting_budget_ = false;
    wanted = !stopped_ && !finished_ && prepaid_ == 0;
    if (wanted) prepaid_ = charge;
  }
  if (!wanted) {
    reader_.budget_.release(charge);
    return;
  }
  pump();
}

void FlashReader::Op::released(int64_t charge) {
  {
    MutexLock lock(mu_);
    --held_;
    // A read being drained keeps one buffer for its next chunk rather than
    // queueing behind reads whose clients do not read: it cannot be starved.
    if (held_ == 0 && prepaid_ == 0 && !stopped_ && next_issue_ <= last_) {
      prepaid_ = charge;
      charge = 0;
    }
  }
  reader_.budget_.release(charge);
  pump();
}

void FlashReader::Op::cancel() {
  mu_.lock();  // by hand: maybe_finish() returns unlocked
  if (stopped_ || finished_) return mu_.unlock();
  stopped_ = true;
  if (error_.is_ok()) error_ = Status::unavailable("flash read cancelled");
  maybe_finish();
}

void FlashReader::Op::on_chunk(uint32_t index, Result<flash::FlashChunk> chunk) {
  mu_.lock();  // by hand: maybe_finish() returns unlocked
  --inflight_;
  if (chunk && chunk->data().size() != expected_length(index))
    chunk = Status::corruption(fmt::format("chunk {} of '{}' has {} bytes, expected {}", index,
                                           key_, chunk->data().size(), expected_length(index)));
  Slot& s = slot(index);
  if (!chunk || stopped_) {
    if (!chunk && error_.is_ok()) error_ = chunk.status();
    stopped_ = true;
    int64_t charge = std::exchange(s.charge, 0);
    --held_;
    mu_.unlock();
    reader_.budget_.release(charge);
    mu_.lock();
    return maybe_finish();  // nothing more is issued
  }
  if (copy_)
    fill_copy(index, s, *chunk);
  else
    s.chunk.emplace(std::move(*chunk));
  deliver();
  maybe_finish();
  pump();  // a read slot is free
}

void FlashReader::Op::fill_copy(uint32_t index, Slot& s, flash::FlashChunk& chunk) {
  s.in_copy = true;
  const auto size = static_cast<int64_t>(chunk.data().size());
  if (copy_->adopt(index, chunk.buffer(), chunk.data_offset())) {
    s.in_memory = copy_->pin(index);
    reader_.bytes_adopted_.add(size);
    return;
  }
  copy_chunk(index, chunk.data());
  s.chunk.emplace(std::move(chunk));
}

void FlashReader::Op::deliver() {
  if (delivering_) {  // the thread delivering now takes this one too
    redeliver_ = true;
    return;
  }
  delivering_ = true;
  do {
    redeliver_ = false;
    deliver_in_order();
    serve_followers();
  } while (redeliver_);
  delivering_ = false;
}

void FlashReader::Op::deliver_in_order() {
  while (!stopped_ && next_deliver_ <= last_ && slot(next_deliver_).ready()) {
    uint32_t index = next_deliver_++;
    Slot& s = slot(index);
    const bool in_copy = s.in_copy;
    auto piece = std::make_shared<Piece>(std::move(s.chunk), std::move(s.in_memory),
                                         std::exchange(s.charge, 0), shared_from_this());
    s.reset();
    if (copy_ && !in_copy) copy_chunk(index, piece->data());  // held in memory already
    std::string_view bytes = slice(index, piece->data());
    // Pieces go out in order, without the lock: the consumer may drop a
    // piece at once, and that reads the next chunk.
    mu_.unlock();
    if (!bytes.empty()) callbacks_.on_piece(ValuePiece{bytes, piece});
    piece.reset();
    mu_.lock();
  }
}

void FlashReader::Op::serve_followers() {
  for (size_t k = 0; k < followers_.size(); ++k) {
    std::shared_ptr<Follower> f = followers_[k];
    while (!f->cancelled && f->next <= f->last && f->next < next_deliver_) {
      const uint32_t index = f->next++;
      auto pin = std::make_shared<memory::ChunkPin>(copy_->pin(index));
      const uint64_t start = uint64_t{index} * chunk_size_;
      const uint64_t from = f->offset > start ? f->offset - start : 0;
      const uint64_t end = std::min<uint64_t>(f->offset + f->length - start, pin->bytes().size());
      std::string_view bytes = from < end ? pin->bytes().substr(from, end - from) : "";
      mu_.unlock();
      if (!bytes.empty()) f->callbacks.on_piece(ValuePiece{bytes, std::move(pin)});
      mu_.lock();
    }
    if (f->ended || !(f->cancelled || f->next > f->last)) continue;
    f->ended = true;
    mu_.unlock();
    f->callbacks.on_done(f->cancelled ? Status::unavailable("flash read cancelled") : Status::ok());
    mu_.lock();
  }
  std::erase_if(followers_, [](const std::shared_ptr<Follower>& f) { return f->ended; });
}

class FlashReader::Op::FollowerHandle final : public FlashRead {
 public:
  FollowerHandle(std::weak_ptr<Op> op, std::shared_ptr<Follower> follower)
      : op_(std::move(op)), follower_(std::move(follower)) {}
  void cancel() override {
    if (std::shared_ptr<Op> op = op_.lock()) op->unfollow(follower_);
  }
  // It reads nothing itself: the promotion's read holds the buffers.
  uint32_t chunks_held() const override { return 0; }
  uint64_t chunks_issued() const override { return 0; }

 private:
  std::weak_ptr<Op> op_;
  std::shared_ptr<Follower> follower_;
};

std::shared_ptr<FlashRead> FlashReader::Op::follow(uint64_t offset, uint64_t length,
                                                   FlashReadCallbacks& callbacks) {
  MutexLock lock(mu_);
  if (!copy_ || finished_ || stopped_ || length == 0 || offset + length > object_size_)
    return nullptr;
  auto f = std::make_shared<Follower>(Follower{
      .offset = offset,
      .length = length,
      .next = static_cast<uint32_t>(offset / chunk_size_),
      .last = static_cast<uint32_t>((offset + length - 1) / chunk_size_),
      .callbacks = std::move(callbacks),
  });
  followers_.push_back(f);
  background_.store(false, std::memory_order_relaxed);  // a reader waits now
  deliver();                                            // what was read already, at once
  lock.unlock();
  return std::make_shared<FollowerHandle>(weak_from_this(), std::move(f));
}

void FlashReader::Op::unfollow(const std::shared_ptr<Follower>& follower) {
  MutexLock lock(mu_);
  if (follower->ended || follower->cancelled) return;
  follower->cancelled = true;
  deliver();  // ends it here, or on the thread delivering now
}

void FlashReader::Op::maybe_finish() {
  bool complete = next_deliver_ > last_;
  if (finished_ || delivering_ || !(complete || (stopped_ && inflight_ == 0))) return mu_.unlock();
  finished_ = true;
  Status result = complete && !stopped_ ? Status::ok() : error_;
  // Chunks that arrived but will never be handed out.
  int64_t unused = std::exchange(prepaid_, 0);
  for (Slot& s : ring_) {
    if (!s.ready()) continue;
    unused += std::exchange(s.charge, 0);
    s.reset();
    --held_;
  }
  resident_.clear();
  // Followers not served in full end with the read's error.
  std::vector<std::shared_ptr<Follower>> unserved;
  for (auto& f : followers_) {
    if (f->ended) continue;
    f->ended = true;
    unserved.push_back(f);
  }
  followers_.clear();
  // Nothing more is read from the device: reclaim may have those regions.
  flash::FlashTier::RegionPins pins;
  if (known_) pins = std::move(known_->pins);
  mu_.unlock();
  pins.reset();
  reader_.budget_.release(unused);
  callbacks_.on_done(result);
  for (auto& f : unserved)
    f->callbacks.on_done(result.is_ok() ? Status::unavailable("promotion ended early") : result);
  // Dropped once called: it holds the promotion job.
  if (copy_) std::exchange(on_copied_, {})(std::move(*copy_), result);
}

// --- FlashReader ---

std::shared_ptr<FlashRead> FlashReader::follow(const std::shared_ptr<FlashRead>& read,
                                               uint64_t offset, uint64_t length,
                                               FlashReadCallbacks& callbacks) {
  // Every FlashRead that start() hands out is an Op.
  return read ? static_cast<Op&>(*read).follow(offset, length, callbacks) : nullptr;
}

FlashReaderOptions flash_reader_options(const Config& config) {
  return FlashReaderOptions{
      .chunk_size = static_cast<uint32_t>(config.chunk_size),
      .defaults = ReadWindow{.depth = static_cast<uint32_t>(config.flash_read_window),
                             .parallel = static_cast<uint32_t>(config.flash_read_inflight)},
      .buffer_limit = std::max(config.flash_read_buffer, 2 * config.chunk_size)};
}

FlashReader::FlashReader(flash::FlashTier& flash, const FlashReaderOptions& options,
                         MetricsRegistry& metrics)
    : flash_(flash),
      chunk_size_(options.chunk_size),
      default_depth_(std::max<uint32_t>(options.defaults.depth, 1)),
      default_parallel_(std::max<uint32_t>(options.defaults.parallel, 1)),
      budget_(options.buffer_limit,
              BufferBudget::Metrics{
                  .used = metrics.gauge("tierkv_flash_read_buffer_used_bytes",
                                        "bytes of flash read buffers held (read, or waiting to be "
                                        "sent)"),
                  .limit = metrics.gauge("tierkv_flash_read_buffer_limit_bytes",
                                         "cap on flash read buffers (flash-read-buffer)"),
                  .waits = metrics.counter("tierkv_flash_read_buffer_waits_total",
                                           "chunk reads that waited for read-buffer space")}),
      bytes_copied_(metrics.counter("tierkv_promotion_bytes_copied_total",
                                    "value bytes promotions copied into memory chunks")),
      bytes_adopted_(metrics.counter(
          "tierkv_promotion_bytes_adopted_total",
          "value bytes promotions installed by keeping the flash read's buffer (no copy)")) {}

void FlashReader::set_defaults(ReadWindow window) {
  if (window.depth > 0) default_depth_.store(window.depth);
  if (window.parallel > 0) default_parallel_.store(window.parallel);
}

ReadWindow FlashReader::defaults() const {
  return ReadWindow{.depth = default_depth_.load(), .parallel = default_parallel_.load()};
}

std::shared_ptr<FlashRead> FlashReader::start(
    std::string_view key, const flash::FlashObjectSummary& info, uint64_t offset, uint64_t length,
    FlashReadCallbacks callbacks, ReadWindow window, std::optional<memory::ObjectWriter> copy,
    OnCopied on_copied, std::vector<memory::ChunkPin> resident,
    std::optional<flash::FlashTier::VersionLocations> where, bool background) {
  if (length == 0 && !copy) {
    callbacks.on_done(Status::ok());
    return nullptr;
  }
  if (window.depth == 0) window.depth = default_depth_.load(std::memory_order_relaxed);
  if (window.parallel == 0) window.parallel = default_parallel_.load(std::memory_order_relaxed);
  auto op = std::make_shared<Op>(*this, key, info, offset, length, window, std::move(callbacks),
                                 std::move(copy), std::move(on_copied), std::move(resident),
                                 std::move(where), background);
  op->pump();
  return op;
}

}  // namespace tierkv
