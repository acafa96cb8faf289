// Readahead: the sequence one consumer reads and the look-ahead window over
// its chunks. Chunks [front_, front_ + entries_.size()) have a StreamEntry
// each (read ahead, or being read); pump() stages more while fewer than
// window_ are staged and fewer than channels_ are being read. A pump runs
// where something changed: when a look-ahead starts, when the consumer is
// served, when a chunk read ends. It never waits.
#include "store/stream/readahead.h"

#include <algorithm>
#include <bit>
#include <deque>
#include <optional>
#include <string>

#include "core/mutex.h"
#include "store/stream/readahead_span.h"
#include "store/stream/stream_context.h"
#include "store/stream/stream_entry.h"

namespace tierkv {
namespace {

// Sequential reads (the first included) before a look-ahead starts.
constexpr uint32_t kTrigger = 2;

// Linux's get_init_ra_size(): the request rounded up to a power of two,
// times 4 if small against the maximum, times 2 if medium.
uint32_t initial_window(uint64_t request_chunks, uint32_t max) {
  uint64_t w = std::bit_ceil(std::max<uint64_t>(request_chunks, 1));
  if (w <= max / 32)
    w *= 4;
  else if (w <= max / 4)
    w *= 2;
  else
    w = max;
  return static_cast<uint32_t>(std::min<uint64_t>(w, max));
}

}  // namespace

class Readahead::Impl : public std::enable_shared_from_this<Impl> {
 public:
  explicit Impl(StreamContext& ctx)
      : ctx_(ctx), chunk_(std::max<uint32_t>(ctx.memory.chunk_size(), 1)) {}
  ~Impl() { end_lookahead(); }

  ReadStart read(std::string_view key, uint64_t offset, uint64_t length, FlashReadCallbacks& cb,
                 const ReadOptions& options);
  void reset() {
    end_lookahead();
    MutexLock lock(mu_);
    key_.clear();
    seq_ = 0;
  }
  bool active() const {
    MutexLock lock(mu_);
    return active_;
  }
  uint32_t window() const {
    MutexLock lock(mu_);
    return active_ ? window_ : 0;
  }
  uint32_t staged() const {
    MutexLock lock(mu_);
    return static_cast<uint32_t>(entries_.size());
  }
  ReadaheadCounts counts() const {
    MutexLock lock(mu_);
    return counts_;
  }

 private:
  // Serves a sequential read from the look-ahead into `out`; false (the
  // callbacks untouched) if it cannot.
  bool serve(std::string_view key, uint64_t offset, uint64_t length, FlashReadCallbacks& cb,
             const ReadOptions& options, ReadStart& out);
  // Takes the parts of [offset, end) out of the window into `span`; false
  // if the window does not hold them.
  bool take_parts(uint64_t offset, uint64_t end, SpanRead& span, bool& hit);
  // After a plain read: the sequence goes on or starts again, and may start
  // a look-ahead.
  void note_plain(std::string_view key, const ReadStart& r, bool sequential);
  // Stages chunks up to the window, and at least up to chunk `need_end`.
  void pump(uint64_t need_end = 0);
  // pump() once a read was served: on a store worker if chunks are still
  // read ahead, here if none are.
  void pump_after_take();
  // pump() would start a read now: a chunk left inside the window, and a
  // channel free.
  bool room_to_read_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return active_ && front_ + entries_.size() < std::min(chunk_count(), front_ + window_) &&
           inflight_ < channels_;
  }
  std::atomic<bool> pump_queued_{false};  // a pump waits for a store worker
  void on_read_done(uint64_t gen);
  void on_carry(uint64_t gen, ReadaheadCarry carry);
  void end_lookahead();
  uint64_t chunk_count() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (size_ + chunk_ - 1) / chunk_;
  }

  StreamContext& ctx_;
  const uint64_t chunk_;

  mutable Mutex mu_;
  // The sequence: where its next read starts, and how many reads it had.
  std::string key_ ABSL_GUARDED_BY(mu_);
  uint64_t next_offset_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  // The look-ahead, for one version of key_.
  bool active_ ABSL_GUARDED_BY(mu_) = false;
  // a look-ahead's number: callbacks of an ended one are ignored
  uint64_t gen_ ABSL_GUARDED_BY(mu_) = 0;
  ObjectInfo info_ ABSL_GUARDED_BY(mu_);
  uint64_t size_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t window_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t max_window_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t channels_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t front_ ABSL_GUARDED_BY(mu_) = 0;  // chunk of entries_.front()
  std::deque<std::shared_ptr<StreamEntry>> entries_ ABSL_GUARDED_BY(mu_);
  uint32_t inflight_ ABSL_GUARDED_BY(mu_) = 0;
  // the rest of the chunk the last read ended in
  std::optional<ReadaheadCarry> carry_ ABSL_GUARDED_BY(mu_);
  ReadaheadCounts counts_ ABSL_GUARDED_BY(mu_);
};

ReadStart Readahead::Impl::read(std::string_view key, uint64_t offset, uint64_t length,
                                FlashReadCallbacks& cb, const ReadOptions& options) {
  bool sequential;
  {
    MutexLock lock(mu_);
    sequential = seq_ > 0 && key == key_ && offset == next_offset_;
  }
  if (!ctx_.readahead.load(std::memory_order_relaxed)) {
    reset();
    return ctx_.store.read(key, offset, length, std::move(cb), options);
  }
  ReadStart out;
  if (sequential && serve(key, offset, length, cb, options, out)) return out;
  // Out of order, or the look-ahead cannot serve it: it ends.
  end_lookahead();
  out = ctx_.store.read(key, offset, length, std::move(cb), options);
  note_plain(key, out, sequential);
  return out;
}

void Readahead::Impl::note_plain(std::string_view key, const ReadStart& r, bool sequential) {
  {
    MutexLock lock(mu_);
    if (r.where != ReadStart::Where::kFlash) {
      // Memory answers at once: nothing to read ahead.
      key_.clear();
      seq_ = 0;
      return;
    }
    if (!sequential) {
      key_ = std::string(key);
      seq_ = 0;
    }
    ++seq_;
    next_offset_ = r.offset + r.length;
    if (seq_ < kTrigger || next_offset_ >= r.object_size || active_) return;
    active_ = true;
    ++gen_;
    info_ = ObjectInfo{};
    info_.version = r.version;
    info_.size = r.object_size;
    info_.expire_at_ms = r.expire_at_ms;
    size_ = r.object_size;
    max_window_ = ctx_.readahead_max_chunks.load();
    window_ = initial_window((r.length + chunk_ - 1) / chunk_, max_window_);
    channels_ = ctx_.channels.load();
    front_ = next_offset_ / chunk_;
    inflight_ = 0;
    carry_.reset();
    ++counts_.sequences;
  }
  ctx_.metrics.ra_sequences.add();
  pump();
}

bool Readahead::Impl::serve(std::string_view key, uint64_t offset, uint64_t length,
                            FlashReadCallbacks& cb, const ReadOptions& options, ReadStart& out) {
  // Served only for the version the look-ahead reads (a key deleted or
  // rewritten since is read plainly).
  std::optional<ObjectInfo> now = ctx_.store.stat(key);
  uint64_t end;
  uint64_t gen;
  ObjectInfo info;
  {
    MutexLock lock(mu_);
    if (!active_ || !now || now->version != info_.version || offset >= size_) return false;
    end = std::min(size_ - offset, length) + offset;
    gen = gen_;
    info = info_;
  }
  // A read larger than the window reads the rest of its chunks now.
  pump((end + chunk_ - 1) / chunk_);
  std::weak_ptr<Impl> weak = weak_from_this();
  auto span = std::make_shared<SpanRead>(offset, end, std::move(cb), [weak, gen](ReadaheadCarry c) {
    if (auto self = weak.lock()) self->on_carry(gen, std::move(c));
  });
  bool hit = true;
  if (!take_parts(offset, end, *span, hit)) {
    cb = span->release_consumer();  // nothing reached it
    span->cancel();
    return false;
  }
  (hit ? ctx_.metrics.ra_hits : ctx_.metrics.ra_late).add();
  {
    // Before the span runs: it may end at once, and its carry is kept only
    // where the sequence goes on.
    MutexLock lock(mu_);
    ++(hit ? counts_.hits : counts_.late);
    ++seq_;
    next_offset_ = end;
    // The consumer keeps reading what was read ahead: the window doubles.
    window_ = std::min(window_ * 2, max_window_);
  }
  span->go();
  if (options.count_access) ctx_.store.count_streamed_read(key, options.use_once);
  out.where = ReadStart::Where::kFlash;
  out.version = info.version;
  out.object_size = info.size;
  out.expire_at_ms = info.expire_at_ms;
  out.offset = offset;
  out.length = end - offset;
  out.flash_read = std::move(span);
  pump_after_take();
  return true;
}

void Readahead::Impl::pump_after_take() {
  // With chunks still read ahead of the consumer, a worker has time to
  // start the next reads (see StreamContext::pool); with none, only a
  // pump here keeps the next read ahead of the consumer's next request.
  bool staged;
  {
    MutexLock lock(mu_);
    if (!room_to_read_locked()) return;  // a pump could start nothing now
    staged = !entries_.empty();
  }
  std::weak_ptr<Impl> weak = weak_from_this();
  if (staged && ctx_.pump_on_worker(pump_queued_, [weak] {
        if (auto self = weak.lock()) {
          self->pump_queued_.store(false, std::memory_order_release);
          self->pump();
        }
      }))
    return;
  pump();
}

bool Readahead::Impl::take_parts(uint64_t offset, uint64_t end, SpanRead& span, bool& hit) {
  std::optional<ReadaheadCarry> carry;
  std::vector<std::shared_ptr<StreamEntry>> parts;
  {
    MutexLock lock(mu_);
    if (!active_) return false;
    uint64_t from = offset;
    if (carry_) {
      if (carry_->offset != offset) return false;
      from = carry_->end;
    } else if (offset / chunk_ != front_) {
      return false;
    }
    // The chunks [front_, last] the range needs beyond the carry.
    const uint64_t need_end = from < end ? (end - 1) / chunk_ + 1 : front_;
    if (need_end > front_ + entries_.size()) return false;
    for (uint64_t c = front_; c < need_end; ++c) {
      parts.push_back(std::move(entries_.front()));
      entries_.pop_front();
    }
    front_ = need_end;
    carry = std::move(carry_);
    carry_.reset();
  }
  // Attached without the lock: an entry may deliver what arrived at once.
  if (carry) span.add_carry(std::move(*carry));
  for (size_t i = 0; i < parts.size(); ++i) {
    StreamEntry::Attach a = span.add_entry(parts[i]);
    if (a == StreamEntry::Attach::kRefused) {
      for (size_t j = i; j < parts.size(); ++j) parts[j]->drop();
      return false;
    }
    hit = hit && a == StreamEntry::Attach::kHit;
  }
  return true;
}

void Readahead::Impl::pump(uint64_t need_end) {
  for (;;) {
    uint64_t chunk;
    uint64_t gen;
    ObjectInfo info;
    std::string key;
    {
      MutexLock lock(mu_);
      if (!active_ || ctx_.closing.load(std::memory_order_acquire)) return;
      chunk = front_ + entries_.size();
      const uint64_t target = std::min(chunk_count(), std::max(front_ + window_, need_end));
      if (chunk >= target || (chunk >= need_end && inflight_ >= channels_)) return;
      // (room_to_read_locked() is this test with need_end 0.)
      gen = gen_;
      info = info_;
      key = key_;
    }
    std::weak_ptr<Impl> weak = weak_from_this();
    std::shared_ptr<StreamEntry> e =
        StreamEntry::make(ctx_, key, info, chunk * chunk_, chunk_, [weak, gen] {
          if (auto self = weak.lock()) self->on_read_done(gen);
        });
    if (!e) return;  // the lane is full: served reads make room
    {
      MutexLock lock(mu_);
      // The consumer may have moved on (or out of order) meanwhile.
      if (!active_ || gen != gen_ || front_ + entries_.size() != chunk) return;
      entries_.push_back(e);
      ++inflight_;
    }
    if (StreamEntry::start_read(ctx_, e)) {
      ctx_.metrics.ra_issued.add();
      MutexLock lock(mu_);
      ++counts_.issued;
    }
  }
}

void Readahead::Impl::on_read_done(uint64_t gen) {
  {
    MutexLock lock(mu_);
    if (gen != gen_ || inflight_ == 0) return;
    --inflight_;
  }
  pump();
}

void Readahead::Impl::on_carry(uint64_t gen, ReadaheadCarry carry) {
  MutexLock lock(mu_);
  // Kept only if the sequence goes on there (and the carry is released,
  // with its charge, after the lock otherwise).
  if (gen == gen_ && active_ && carry.offset == next_offset_ && !carry_) carry_ = std::move(carry);
}

void Readahead::Impl::end_lookahead() {
  std::deque<std::shared_ptr<StreamEntry>> unread;
  std::optional<ReadaheadCarry> carry;
  {
    MutexLock lock(mu_);
    if (!active_) return;
    active_ = false;
    ++gen_;
    unread.swap(entries_);
    carry.swap(carry_);
    inflight_ = 0;
  }
  uint64_t wasted = 0;
  for (const auto& e : unread) {
    if (e->may_serve()) ++wasted;  // read from flash, or about to be
    e->drop();
  }
  if (wasted == 0) return;
  ctx_.metrics.ra_wasted.add(wasted);
  MutexLock lock(mu_);
  counts_.wasted += wasted;
}

// --- Readahead ---

Readahead::~Readahead() {
  impl_->reset();
}

ReadStart Readahead::read(std::string_view key, uint64_t offset, uint64_t length,
                          FlashReadCallbacks callbacks, const ReadOptions& options) {
  return impl_->read(key, offset, length, callbacks, options);
}

void Readahead::reset() {
  impl_->reset();
}

bool Readahead::active() const {
  return impl_->active();
}

uint32_t Readahead::window() const {
  return impl_->window();
}

uint32_t Readahead::staged() const {
  return impl_->staged();
}

ReadaheadCounts Readahead::counts() const {
  return impl_->counts();
}

std::unique_ptr<Readahead> Store::open_readahead() {
  return std::unique_ptr<Readahead>(new Readahead(std::make_shared<Readahead::Impl>(*streams_)));
}

}  // namespace tierkv
