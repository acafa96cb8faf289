// StreamReader: the look-ahead window over an ordered list of keys. Keys
// [pos_, staged_end_) have a StreamEntry each (read ahead, being read, or
// found in memory); pump() stages more while fewer than depth_ are staged
// and fewer than channels_ are being read. A pump runs wherever something
// changed: at open, when a look-ahead read ends, and when the consumer
// takes a key unless a read's end will pump in time (see
// completion_pumps_in_time_locked). It never waits: the reads it starts
// are the store's pulled reads.
#include "store/stream/stream_reader.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include "core/clock.h"
#include "core/mutex.h"
#include "store/stream/stream_context.h"
#include "store/stream/stream_entry.h"
#include "store/worker_pool.h"

namespace tierkv {

// --- StreamContext ---

StreamMetrics::StreamMetrics(MetricsRegistry& r)
    : issued(r.counter("tierkv_stream_lookahead_reads_total", "look-ahead reads streams started")),
      hits(r.counter("tierkv_stream_lookahead_hits_total",
                     "values read ahead that had arrived when the consumer came")),
      late(
          r.counter("tierkv_stream_late_total", "values of a stream the consumer had to wait for")),
      wasted(r.counter("tierkv_stream_wasted_total",
                       "values read ahead and dropped unread (reset, out of order, changed)")),
      open(r.gauge("tierkv_stream_open", "streams open")),
      useonce_dropped(r.gauge("tierkv_stream_useonce_dropped_chunks",
                              "use-once chunks dropped as soon as they were served")),
      lane_bytes(r.gauge("tierkv_stream_lane_bytes",
                         "look-ahead bytes charged to the memory tier's use-once lane")),
      ra_sequences(r.counter("tierkv_stream_readahead_sequences_total",
                             "sequential ranged reads of one object detected (readahead started)")),
      ra_issued(r.counter("tierkv_stream_readahead_reads_total", "readahead chunk reads started")),
      ra_hits(r.counter("tierkv_stream_readahead_hits_total",
                        "ranged reads served from readahead that had arrived")),
      ra_late(r.counter("tierkv_stream_readahead_late_total",
                        "ranged reads served from readahead that waited for it")),
      ra_wasted(r.counter("tierkv_stream_readahead_wasted_total",
                          "readahead chunks dropped unread (out of order, changed, reset)")) {}

StreamContext::StreamContext(Store& s, memory::MemoryTier& m, MetricsRegistry& r,
                             const Config& config)
    : store(s),
      memory(m),
      metrics(r),
      depth(0),
      channels(1),
      readahead(true),
      readahead_max_chunks(1) {
  set_defaults(config);
}

void StreamContext::set_defaults(const Config& config) {
  depth.store(static_cast<int32_t>(config.stream_depth));
  readahead.store(config.readahead);
  readahead_max_chunks.store(
      static_cast<uint32_t>(std::max<int64_t>(config.readahead_max_chunks, 1)));
  channels.store(static_cast<uint32_t>(std::max<int64_t>(config.stream_channels, 1)));
  memory.set_use_once_max_fraction(config.stream_useonce_max_fraction);
}

bool StreamContext::pump_on_worker(std::atomic<bool>& queued, std::function<void()> pump) const {
  WorkerPool* p = pool.load(std::memory_order_acquire);
  if (p == nullptr) return false;
  if (queued.exchange(true, std::memory_order_acq_rel)) return true;
  // The flag lives as long as the pump's owner, which `pump` checks for
  // first (a weak pointer): it is cleared only through a live owner.
  const bool taken = p->try_submit([pump = std::move(pump)](bool run) {
    if (run) pump();
  });
  if (!taken) queued.store(false, std::memory_order_release);
  return taken;
}

uint64_t StreamContext::latency_estimate_ns() const {
  constexpr uint64_t kUnmeasured = 100'000;
  const Histogram* h = read_latency.load(std::memory_order_acquire);
  if (h == nullptr) return kUnmeasured;
  HistogramSnapshot snap = h->snapshot();
  return snap.count == 0 ? kUnmeasured : snap.percentile(0.5);
}

// --- the window ---

class StreamReader::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(StreamContext& ctx, std::vector<std::string> keys, const StreamOptions& o);
  ~Impl() { end_lookahead(); }

  void pump();
  // pump() on a store worker, or here if no worker takes it.
  void pump_off_thread();
  ReadStart read(std::string_view key, uint64_t offset, uint64_t length, FlashReadCallbacks cb,
                 bool use_once);
  Result<StreamValue> next();
  void end_lookahead();
  bool active() const {
    MutexLock lock(mu_);
    return !stopped_ && pos_ < keys_.size();
  }
  size_t position() const {
    MutexLock lock(mu_);
    return pos_;
  }
  uint32_t depth() const {
    MutexLock lock(mu_);
    return depth_;
  }
  StreamCounts counts() const {
    MutexLock lock(mu_);
    return counts_;
  }
  StreamContext& context() { return ctx_; }

 private:
  // Starts the look-ahead read of a staged key.
  void stage(const std::shared_ptr<StreamEntry>& e);
  // A look-ahead read started at `issued_ns` ended (on the flash
  // completion thread, or inline if it found no flash read to start).
  void on_read_done(uint64_t issued_ns);
  // The consumer just took a key: true if the end of a read in flight will
  // pump soon enough for the key this take made room for to arrive before
  // the consumer reaches it. Starting a read costs the consumer a wake-up
  // of the kernel's I/O worker or of the device (~5-10 us on a VM); the
  // completion thread is awake anyway.
  bool completion_pumps_in_time_locked(uint64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // pump() would start a read now: a key is left to stage, the window has
  // room and a channel is free.
  bool room_to_stage_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !stopped_ && staged_end_ < keys_.size() && staged_end_ - pos_ < depth_ &&
           inflight_ < channels_;
  }
  // Reads the flash read latency's 90th percentile; every kRefreshTakes
  // takes, outside the lock (a snapshot copies the histogram's buckets).
  void refresh_latency();
  ReadStart plain(std::string_view key, uint64_t offset, uint64_t length, FlashReadCallbacks cb,
                  bool use_once);
  ReadStart serve(std::string_view key, const std::shared_ptr<StreamEntry>& e, uint64_t offset,
                  uint64_t length, FlashReadCallbacks cb, bool use_once);
  void count_wasted(uint64_t n);
  // The consumer took a key: with an automatic depth, D = ceil(L / C) + 1
  // from its pace C (the smoothed time between takes).
  void note_pace_locked(uint64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  StreamContext& ctx_;
  const std::vector<std::string> keys_;
  const bool auto_depth_;
  const uint32_t channels_;
  const bool use_once_;
  const uint64_t latency_ns_;  // the estimate at open (automatic depth)

  mutable Mutex mu_;
  uint32_t depth_ ABSL_GUARDED_BY(mu_);
  size_t pos_ ABSL_GUARDED_BY(mu_) = 0;
  size_t staged_end_ ABSL_GUARDED_BY(mu_) = 0;
  // keys [pos_, staged_end_)
  std::deque<std::shared_ptr<StreamEntry>> entries_ ABSL_GUARDED_BY(mu_);
  uint32_t inflight_ ABSL_GUARDED_BY(mu_) = 0;
  // pumps between staging a key and counting its read
  uint32_t staging_ ABSL_GUARDED_BY(mu_) = 0;
  CondVar staged_cv_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  StreamCounts counts_ ABSL_GUARDED_BY(mu_);
  int64_t last_take_ns_ ABSL_GUARDED_BY(mu_) = 0;
  double pace_ns_ ABSL_GUARDED_BY(mu_) = 0;
  // The consumer's own time per value: the gaps after a take that waited
  // for nothing. The refill plans on it, not on pace_ns_, which includes
  // waits: a refill left late would slow the pace and so seem ever later.
  double own_pace_ns_ ABSL_GUARDED_BY(mu_) = 0;
  bool last_take_hit_ ABSL_GUARDED_BY(mu_) = false;
  // start times of the reads in flight
  std::deque<uint64_t> issued_ns_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> read_ns_;         // flash read latency now (90th percentile)
  std::atomic<bool> pump_queued_{false};  // a pump waits for a store worker
  uint32_t takes_ = 0;
};

namespace {

constexpr uint32_t kMaxAutoDepth = 64;
constexpr uint32_t kRefreshTakes = 32;

}  // namespace

StreamReader::Impl::Impl(StreamContext& ctx, std::vector<std::string> keys, const StreamOptions& o)
    : ctx_(ctx),
      keys_(std::move(keys)),
      auto_depth_(o.depth < 0 && ctx.depth.load() == 0),
      channels_(o.channels > 0 ? o.channels : ctx.channels.load()),
      use_once_(o.use_once),
      latency_ns_(ctx.latency_estimate_ns()),
      read_ns_(latency_ns_) {
  int32_t d = o.depth >= 0 ? o.depth : ctx.depth.load();
  depth_ = auto_depth_ ? 2 : static_cast<uint32_t>(std::max(d, 0));
}

void StreamReader::Impl::pump() {
  for (;;) {
    std::shared_ptr<StreamEntry> e;
    std::string key;
    {
      MutexLock lock(mu_);
      if (!room_to_stage_locked() || ctx_.closing.load(std::memory_order_acquire)) return;
      key = keys_[staged_end_];
    }
    std::optional<ObjectInfo> info = ctx_.store.stat_brief(key);
    std::weak_ptr<Impl> weak = weak_from_this();
    const uint64_t issued = mono_ns();
    e = StreamEntry::make(ctx_, key, info, 0, UINT64_MAX, [weak, issued] {
      if (auto self = weak.lock()) self->on_read_done(issued);
    });
    if (!e) return;  // the lane is full
    {
      MutexLock lock(mu_);
      // The consumer may have moved on (or out of order) meanwhile.
      if (stopped_ || staged_end_ >= keys_.size() || keys_[staged_end_] != key ||
          staged_end_ < pos_ || inflight_ >= channels_)
        return;
      ++staged_end_;
      ++inflight_;
      ++staging_;
      issued_ns_.push_back(issued);
      entries_.push_back(e);
    }
    stage(e);
  }
}

void StreamReader::Impl::pump_off_thread() {
  std::weak_ptr<Impl> weak = weak_from_this();
  const bool queued = ctx_.pump_on_worker(pump_queued_, [weak] {
    if (auto self = weak.lock()) {
      self->pump_queued_.store(false, std::memory_order_release);
      self->pump();
    }
  });
  if (!queued) pump();
}

void StreamReader::Impl::stage(const std::shared_ptr<StreamEntry>& e) {
  const bool flash = StreamEntry::start_read(ctx_, e);
  if (flash) ctx_.metrics.issued.add();
  MutexLock lock(mu_);
  if (flash) ++counts_.issued;
  if (--staging_ == 0) staged_cv_.notify_all();
}

void StreamReader::Impl::on_read_done(uint64_t issued_ns) {
  {
    MutexLock lock(mu_);
    --inflight_;
    auto it = std::find(issued_ns_.begin(), issued_ns_.end(), issued_ns);
    if (it != issued_ns_.end()) issued_ns_.erase(it);
  }
  pump();
}

void StreamReader::Impl::refresh_latency() {
  const Histogram* h = ctx_.read_latency.load(std::memory_order_acquire);
  if (h == nullptr) return;
  const HistogramSnapshot snap = h->snapshot();
  if (snap.count > 0) read_ns_.store(snap.percentile(0.9), std::memory_order_relaxed);
}

bool StreamReader::Impl::completion_pumps_in_time_locked(uint64_t now_ns) {
  if (inflight_ == 0 || issued_ns_.empty() || own_pace_ns_ <= 0) return false;
  // The oldest read in flight ends within read_ns_ (the 90th percentile)
  // of its start and then starts the read of the key just made room for,
  // which ends within read_ns_ too; the consumer reaches that key after the
  // staged ones and the one it took. A read already overdue is in the
  // latency's tail (a real device's): it may end much later.
  const uint64_t read_ns = read_ns_.load(std::memory_order_relaxed);
  const uint64_t ends = issued_ns_.front() + read_ns;
  if (ends <= now_ns) return false;
  const double arrives = static_cast<double>(ends - now_ns + read_ns);
  const double reached = static_cast<double>(staged_end_ - pos_ + 1) * own_pace_ns_;
  return arrives <= reached;
}

void StreamReader::Impl::note_pace_locked(uint64_t now_ns) {
  const int64_t now = static_cast<int64_t>(now_ns);
  if (last_take_ns_ != 0) {
    const double gap = static_cast<double>(now - last_take_ns_);
    pace_ns_ = pace_ns_ == 0 ? gap : 0.75 * pace_ns_ + 0.25 * gap;
    if (last_take_hit_) own_pace_ns_ = own_pace_ns_ == 0 ? gap : 0.75 * own_pace_ns_ + 0.25 * gap;
  }
  last_take_hit_ = false;  // until serve() says otherwise
  last_take_ns_ = now;
  if (!auto_depth_ || pace_ns_ <= 0) return;
  const double d = std::ceil(static_cast<double>(latency_ns_) / pace_ns_) + 1;
  depth_ = static_cast<uint32_t>(std::clamp(d, 1.0, static_cast<double>(kMaxAutoDepth)));
}

ReadStart StreamReader::Impl::plain(std::string_view key, uint64_t offset, uint64_t length,
                                    FlashReadCallbacks cb, bool use_once) {
  return ctx_.store.read(
      key, offset, length, std::move(cb),
      ReadOptions{.window = ReadWindow{}, .use_once = use_once, .count_access = true});
}

ReadStart StreamReader::Impl::read(std::string_view key, uint64_t offset, uint64_t length,
                                   FlashReadCallbacks cb, bool use_once) {
  use_once = use_once || use_once_;
  std::shared_ptr<StreamEntry> e;
  bool in_order = false;
  bool again = false;  // the key just served, read again (a value read in parts)
  bool pump_here = true;
  bool pump_inline = true;
  bool refresh = false;
  {
    MutexLock lock(mu_);
    // In order, the stream moves on, with look-ahead or (once it ended)
    // without.
    if (pos_ < keys_.size() && keys_[pos_] == key) {
      in_order = true;
      if (!entries_.empty()) {
        e = std::move(entries_.front());
        entries_.pop_front();
      } else {
        staged_end_ = pos_ + 1;
      }
      ++pos_;
      const uint64_t now = mono_ns();
      note_pace_locked(now);
      refresh = ++takes_ % kRefreshTakes == 0;
      pump_here = room_to_stage_locked() && !completion_pumps_in_time_locked(now);
      // With nothing staged ahead, the consumer may be back before a worker
      // runs: only a pump here keeps the next key read ahead.
      pump_inline = staged_end_ == pos_;
    } else {
      again = pos_ > 0 && keys_[pos_ - 1] == key;
    }
  }
  if (!in_order) {
    if (!again) end_lookahead();  // an out-of-order read
    return plain(key, offset, length, std::move(cb), use_once);
  }
  ReadStart r = serve(key, e, offset, length, std::move(cb), use_once);
  if (pump_here) pump_inline ? pump() : pump_off_thread();
  if (refresh) refresh_latency();
  return r;
}

void StreamReader::Impl::count_wasted(uint64_t n) {
  if (n == 0) return;
  ctx_.metrics.wasted.add(n);
  MutexLock lock(mu_);
  counts_.wasted += n;
}

ReadStart StreamReader::Impl::serve(std::string_view key, const std::shared_ptr<StreamEntry>& e,
                                    uint64_t offset, uint64_t length, FlashReadCallbacks cb,
                                    bool use_once) {
  // Nothing read ahead (depth 0, or the lane was full): a plain read.
  if (!e) return plain(key, offset, length, std::move(cb), use_once);
  // Served only if it is still the key's current version (a key deleted or
  // rewritten since is read again) and the look-ahead read is a flash read
  // of it (or is only being started: the consumer then waits for it).
  std::optional<ObjectInfo> now = ctx_.store.stat_brief(key);
  if (!now || now->version != e->version() || !e->may_serve()) {
    if (e->read_from_flash()) count_wasted(1);
    e->drop();
    return plain(key, offset, length, std::move(cb), use_once);
  }
  ReadStart out;
  out.where = ReadStart::Where::kFlash;
  out.version = e->version();
  out.object_size = e->object_size();
  out.expire_at_ms = e->expire_at_ms();
  out.offset = std::min(offset, out.object_size);
  out.length = std::min(length, out.object_size - out.offset);
  out.flash_read = e;
  const StreamEntry::Attach a = e->attach(out.offset, out.length, cb);
  // The read found memory or another version just now: read plainly.
  if (a == StreamEntry::Attach::kRefused) {
    e->drop();
    return plain(key, offset, length, std::move(cb), use_once);
  }
  const bool arrived = a == StreamEntry::Attach::kHit;
  (arrived ? ctx_.metrics.hits : ctx_.metrics.late).add();
  {
    MutexLock lock(mu_);
    ++(arrived ? counts_.hits : counts_.late);
    last_take_hit_ = arrived;
  }
  ctx_.store.count_streamed_read(e->key(), use_once);
  if (use_once) {
    const uint64_t chunk = std::max<uint32_t>(ctx_.memory.chunk_size(), 1);
    ctx_.memory.note_use_once_dropped(std::max<uint64_t>((out.object_size + chunk - 1) / chunk, 1));
  }
  return out;
}

void StreamReader::Impl::end_lookahead() {
  std::deque<std::shared_ptr<StreamEntry>> unread;
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    // A pump may be starting the read of a key it staged: once it has, that
    // read is counted issued, so the wasted count below matches it.
    while (staging_ != 0) staged_cv_.wait(mu_);
    unread.swap(entries_);
    staged_end_ = pos_;
  }
  uint64_t wasted = 0;
  for (const auto& e : unread) {
    if (e->may_serve()) ++wasted;  // read from flash, or about to be
    e->drop();
  }
  count_wasted(wasted);
}

Result<StreamValue> StreamReader::Impl::next() {
  std::string key;
  {
    MutexLock lock(mu_);
    if (pos_ >= keys_.size()) return Status::out_of_range("end of stream");
    key = keys_[pos_];
  }
  struct Wait {
    Mutex mu;
    CondVar cv;
    std::vector<ValuePiece> pieces ABSL_GUARDED_BY(mu);
    bool done ABSL_GUARDED_BY(mu) = false;
    std::atomic<bool> ready{false};  // done, for the yielding wait
    Status status ABSL_GUARDED_BY(mu);
  };
  auto wait = std::make_shared<Wait>();
  FlashReadCallbacks cb;
  cb.on_piece = [wait](ValuePiece p) {
    MutexLock lock(wait->mu);
    wait->pieces.push_back(std::move(p));
  };
  cb.on_done = [wait](Status st) {
    MutexLock lock(wait->mu);
    wait->status = std::move(st);
    wait->done = true;
    wait->ready.store(true, std::memory_order_release);
    wait->cv.notify_all();
  };
  ReadStart r = read(key, 0, UINT64_MAX, std::move(cb), false);
  StreamValue v;
  v.key_ = key;
  v.version_ = r.version;
  switch (r.where) {
    case ReadStart::Where::kAbsent:
      return Status::not_found(key);
    case ReadStart::Where::kMemory:
      v.version_ = r.view.version();
      v.size_ = r.view.length();
      v.view_ = std::move(r.view);
      return v;
    case ReadStart::Where::kFlash:
      break;
  }
  // A late value is often only microseconds away: a short spin saves the
  // scheduler wake-up of the condition variable. (Not a yield: on a busy
  // machine that gives the core away for a whole time slice.)
  constexpr uint64_t kSpinNs = 50'000;
  const uint64_t until = mono_ns() + kSpinNs;
  while (!wait->ready.load(std::memory_order_acquire) && mono_ns() < until) {
  }
  MutexLock lock(wait->mu);
  while (!wait->done) wait->cv.wait(wait->mu);
  if (!wait->status.is_ok()) {
    wait->pieces.clear();  // a read that failed part-way: nothing of it is kept
    return wait->status;
  }
  v.size_ = r.length;
  v.pieces_ = std::move(wait->pieces);
  return v;
}

// --- StreamReader ---

StreamReader::~StreamReader() {
  impl_->end_lookahead();
  impl_->context().metrics.open.add(-1);
}

Result<StreamValue> StreamReader::next() {
  return impl_->next();
}

ReadStart StreamReader::read(std::string_view key, uint64_t offset, uint64_t length,
                             FlashReadCallbacks callbacks, bool use_once) {
  return impl_->read(key, offset, length, std::move(callbacks), use_once);
}

void StreamReader::reset() {
  impl_->end_lookahead();
}

bool StreamReader::active() const {
  return impl_->active();
}

size_t StreamReader::position() const {
  return impl_->position();
}

uint32_t StreamReader::depth() const {
  return impl_->depth();
}

StreamCounts StreamReader::counts() const {
  return impl_->counts();
}

// --- Store ---

std::unique_ptr<StreamReader> Store::open_stream(std::vector<std::string> keys,
                                                 const StreamOptions& options) {
  auto impl = std::make_shared<StreamReader::Impl>(*streams_, std::move(keys), options);
  streams_->metrics.open.add(1);
  impl->pump();
  return std::unique_ptr<StreamReader>(new StreamReader(std::move(impl)));
}

}  // namespace tierkv
