#include "store/stream/stream_entry.h"

#include <algorithm>
#include <utility>

#include "store/stream/stream_context.h"

namespace tierkv {
namespace {

// A piece's owner plus the lane charge: the charge goes with the last byte.
struct HeldPiece {
  std::shared_ptr<const void> owner;
  std::shared_ptr<LaneCharge> charge;
};

}  // namespace

StreamEntry::StreamEntry(std::string key, const ObjectInfo& info, uint64_t offset, uint64_t length,
                         std::shared_ptr<LaneCharge> charge, std::function<void()> on_read_done)
    : key_(std::move(key)),
      offset_(offset),
      length_(length),
      charge_(std::move(charge)),
      on_read_done_(std::move(on_read_done)),
      version_(info.version),
      object_size_(info.size),
      expire_at_ms_(info.expire_at_ms),
      arrived_(offset) {}

std::shared_ptr<StreamEntry> StreamEntry::make(StreamContext& ctx, std::string key,
                                               const std::optional<ObjectInfo>& info,
                                               uint64_t offset, uint64_t length,
                                               std::function<void()> on_read_done) {
  // The size decides the charge; an absent key is staged as absent.
  std::shared_ptr<LaneCharge> charge;
  const uint64_t size = info ? info->size : 0;
  const uint64_t bytes = std::min(length, size - std::min(offset, size));
  if (bytes > 0) {
    if (!ctx.memory.charge_use_once(static_cast<int64_t>(bytes)).is_ok()) return nullptr;
    charge = std::make_shared<LaneCharge>(ctx.memory, static_cast<int64_t>(bytes));
  }
  return std::make_shared<StreamEntry>(std::move(key), info ? *info : ObjectInfo{}, offset, bytes,
                                       std::move(charge), std::move(on_read_done));
}

bool StreamEntry::start_read(StreamContext& ctx, const std::shared_ptr<StreamEntry>& e) {
  if (ctx.closing.load(std::memory_order_acquire)) {
    e->started(ReadStart{});  // as absent: a consumer attached gets NotFound
    return false;
  }
  // One read per channel: the range, its chunks one after another.
  const uint64_t chunk = std::max<uint32_t>(ctx.memory.chunk_size(), 1);
  const uint32_t chunks =
      static_cast<uint32_t>(std::max<uint64_t>((e->length_ + chunk - 1) / chunk, 1));
  ReadStart r = ctx.store.read(e->key(), e->offset_, e->length_, staging_callbacks(e),
                               ReadOptions{.window = ReadWindow{.depth = chunks, .parallel = 1},
                                           .use_once = true,
                                           .count_access = false});
  const bool flash = r.where == ReadStart::Where::kFlash;
  e->started(std::move(r));
  return flash;
}

FlashReadCallbacks StreamEntry::staging_callbacks(const std::shared_ptr<StreamEntry>& self) {
  FlashReadCallbacks cb;
  cb.on_piece = [self](ValuePiece p) { self->on_piece(std::move(p)); };
  cb.on_done = [self](Status st) { self->on_done(std::move(st)); };
  return cb;
}

void StreamEntry::started(ReadStart&& r) {
  std::shared_ptr<FlashRead> cancel_now;
  const bool is_flash = r.where == ReadStart::Where::kFlash;
  {
    MutexLock lock(mu_);
    started_ = true;
    if (is_flash && r.version == version_) {
      flash_ = true;
      if (!done_) read_ = r.flash_read;  // a read that already ended is not kept
      if (dropped_ || cancel_asked_) cancel_now = read_;
    } else {
      ignore_ = is_flash;
      cancel_now = is_flash ? r.flash_read : nullptr;
      charge_.reset();
      finish_without_read(r, r.where == ReadStart::Where::kAbsent
                                 ? Status::not_found()
                                 : Status::conflict("value changed while read ahead"));
    }
  }
  if (cancel_now) cancel_now->cancel();
  if (!is_flash) read_done();  // a flash read ends in on_done
}

void StreamEntry::finish_without_read(ReadStart& r, Status error) {
  // Only a consumer that came before the read started needs this; one that
  // comes later reads plainly (may_serve() is false).
  if (!attached_ || done_) return;
  if (r.where == ReadStart::Where::kMemory && r.view.version() == version_) {
    auto view = std::make_shared<ObjectView>(std::move(r.view));
    std::vector<std::string_view> segments;
    view->for_each_segment([&](std::string_view seg) { segments.push_back(seg); });
    for (std::string_view seg : segments) pieces_.push_back(ValuePiece{seg, view});
    error = Status::ok();
  }
  done_ = true;
  status_ = std::move(error);
  deliver();
}

bool StreamEntry::may_serve() const {
  MutexLock lock(mu_);
  return !started_ || flash_;
}

bool StreamEntry::read_from_flash() const {
  MutexLock lock(mu_);
  return flash_;
}

void StreamEntry::read_done() {
  {
    MutexLock lock(mu_);
    if (std::exchange(read_done_called_, true)) return;
  }
  if (on_read_done_) on_read_done_();
}

void StreamEntry::on_piece(ValuePiece piece) {
  MutexLock lock(mu_);
  if (dropped_ || ignore_) return;  // released on return, after the lock
  auto held = std::make_shared<HeldPiece>(HeldPiece{std::move(piece.owner), charge_});
  pieces_.push_back(ValuePiece{piece.bytes, std::move(held)});
  deliver();
}

void StreamEntry::on_done(Status status) {
  // The read holds these callbacks, and so this entry: letting go of the
  // read (and of the charge, which pieces handed out still hold) breaks
  // that cycle.
  std::shared_ptr<FlashRead> read;
  std::shared_ptr<LaneCharge> charge;
  {
    MutexLock lock(mu_);
    if (!ignore_) {
      done_ = true;
      status_ = std::move(status);
      deliver();
    }
    read = std::move(read_);
    charge = std::move(charge_);
  }
  read_done();
}

StreamEntry::Attach StreamEntry::attach(uint64_t offset, uint64_t length,
                                        FlashReadCallbacks& consumer) {
  MutexLock lock(mu_);
  if (started_ && !flash_) return Attach::kRefused;
  attached_ = true;
  consumer_ = std::move(consumer);
  range_offset_ = offset;
  range_length_ = length;
  const bool arrived = done_;
  // What arrived is handed out here (the consumer's thread) only if it is
  // the whole value; otherwise with the next piece, from the read's thread,
  // so that a consumer posting pieces to its own thread keeps their order.
  if (arrived) deliver();
  return arrived ? Attach::kHit : Attach::kLate;
}

std::string_view StreamEntry::clip(uint64_t at, std::string_view bytes) const {
  uint64_t from = std::max(at, range_offset_);
  uint64_t to = std::min(at + bytes.size(), range_offset_ + range_length_);
  if (from >= to) return {};
  return bytes.substr(from - at, to - from);
}

void StreamEntry::deliver() {
  if (delivering_ || !attached_) return;
  delivering_ = true;
  for (;;) {
    if (!pieces_.empty()) {
      ValuePiece p = std::move(pieces_.front());
      pieces_.pop_front();
      std::string_view part = clip(arrived_, p.bytes);
      arrived_ += p.bytes.size();
      // The consumer runs, and the piece is released, without the lock: a
      // release may read the next chunk, which calls back here.
      mu_.unlock();
      if (!part.empty()) consumer_.on_piece(ValuePiece{part, std::move(p.owner)});
      p = ValuePiece{};
      mu_.lock();
      continue;
    }
    if (done_ && !done_sent_) {
      done_sent_ = true;
      Status st = status_;
      // The consumer's callbacks may hold pieces, whose read holds this
      // entry: let go of them once they are done with.
      FlashReadCallbacks consumer = std::move(consumer_);
      mu_.unlock();
      consumer.on_done(std::move(st));
      consumer = FlashReadCallbacks{};
      mu_.lock();
      continue;
    }
    break;
  }
  delivering_ = false;
}

void StreamEntry::drop() {
  std::deque<ValuePiece> unread;
  std::shared_ptr<FlashRead> read;
  {
    MutexLock lock(mu_);
    if (attached_ || dropped_) return;
    dropped_ = true;
    unread.swap(pieces_);
    read = read_;
    charge_.reset();
  }
  if (read) read->cancel();
}

void StreamEntry::cancel() {
  std::shared_ptr<FlashRead> read;
  {
    MutexLock lock(mu_);
    read = read_;
    cancel_asked_ = true;  // a read not started yet is cancelled as it starts
  }
  if (read) read->cancel();
}

uint32_t StreamEntry::chunks_held() const {
  MutexLock lock(mu_);
  return read_ ? read_->chunks_held() : 0;
}

uint64_t StreamEntry::chunks_issued() const {
  MutexLock lock(mu_);
  return read_ ? read_->chunks_issued() : 0;
}

}  // namespace tierkv
