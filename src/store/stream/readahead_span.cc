#include "store/stream/readahead_span.h"

#include <algorithm>
#include <utility>

namespace tierkv {

SpanRead::SpanRead(uint64_t offset, uint64_t end, FlashReadCallbacks consumer, OnCarry on_carry)
    : offset_(offset), end_(end), on_carry_(std::move(on_carry)), consumer_(std::move(consumer)) {}

void SpanRead::add_carry(ReadaheadCarry carry) {
  MutexLock lock(mu_);
  Part p;
  p.at = carry.offset;
  for (ValuePiece& piece : carry.pieces) p.pieces.push_back(std::move(piece));
  p.done = true;
  parts_.push_back(std::move(p));
}

StreamEntry::Attach SpanRead::add_entry(const std::shared_ptr<StreamEntry>& e) {
  size_t index;
  {
    MutexLock lock(mu_);
    index = parts_.size();
    Part p;
    p.at = e->offset();
    parts_.push_back(std::move(p));
    entries_.push_back(e);
  }
  // The entry's pieces wait in the part until go(). The callbacks hold the
  // span until the entry's read ends.
  std::shared_ptr<SpanRead> self = shared_from_this();
  FlashReadCallbacks cb;
  cb.on_piece = [self, index](ValuePiece p) { self->on_piece(index, std::move(p)); };
  cb.on_done = [self, index](Status st) { self->on_done(index, std::move(st)); };
  return e->attach(e->offset(), e->length(), cb);
}

void SpanRead::go() {
  MutexLock lock(mu_);
  going_ = true;
  // Here (the caller's thread) only if every part has arrived; otherwise
  // the thread of the part that arrives next hands out everything from the
  // start. A consumer that posts each piece to its own thread (a
  // connection) would otherwise see pieces posted from the caller's thread
  // overtaken by later ones posted from a completion thread.
  const bool all_done =
      std::all_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.done; });
  if (all_done) forward();
}

FlashReadCallbacks SpanRead::release_consumer() {
  MutexLock lock(mu_);
  finished_ = true;  // whatever the parts still deliver is dropped
  return std::move(consumer_);
}

void SpanRead::on_piece(size_t part, ValuePiece piece) {
  MutexLock lock(mu_);
  if (finished_) return;  // released on return, after the lock
  parts_[part].pieces.push_back(std::move(piece));
  forward();
}

void SpanRead::on_done(size_t part, Status status) {
  MutexLock lock(mu_);
  if (finished_) return;
  parts_[part].done = true;
  parts_[part].status = std::move(status);
  forward();
}

void SpanRead::keep_tail(uint64_t at, const ValuePiece& piece) {
  if (current_ + 1 != parts_.size() || at + piece.bytes.size() <= end_) return;
  const uint64_t from = std::max(at, end_);
  if (carry_.pieces.empty()) carry_.offset = from;
  carry_.pieces.push_back(ValuePiece{piece.bytes.substr(from - at), piece.owner});
  carry_.end = at + piece.bytes.size();
}

void SpanRead::forward() {
  if (!going_ || delivering_ || finished_) return;
  delivering_ = true;
  while (current_ < parts_.size() && !finished_) {
    Part& p = parts_[current_];
    if (!p.pieces.empty()) {
      ValuePiece piece = std::move(p.pieces.front());
      p.pieces.pop_front();
      const uint64_t at = p.at;
      p.at += piece.bytes.size();
      keep_tail(at, piece);
      const uint64_t from = std::max(at, offset_);
      const uint64_t to = std::min(at + piece.bytes.size(), end_);
      // The consumer runs, and the piece is released, without the lock.
      mu_.unlock();
      if (from < to)
        consumer_.on_piece(ValuePiece{piece.bytes.substr(from - at, to - from), piece.owner});
      piece = ValuePiece{};
      mu_.lock();
      continue;
    }
    if (!p.done) break;
    if (!p.status.is_ok()) {
      finish(p.status);
      break;
    }
    ++current_;
  }
  if (current_ == parts_.size() && !finished_) finish(Status::ok());
  delivering_ = false;
}

void SpanRead::finish(Status status) {
  finished_ = true;
  FlashReadCallbacks consumer = std::move(consumer_);
  ReadaheadCarry carry = std::move(carry_);
  std::vector<std::shared_ptr<StreamEntry>> entries = entries_;
  std::vector<Part> parts = std::move(parts_);  // what waits is released
  parts_.clear();
  current_ = 0;
  mu_.unlock();
  if (status.is_ok()) {
    if (!carry.pieces.empty() && on_carry_) on_carry_(std::move(carry));
  } else {
    for (const auto& e : entries) e->cancel();  // the rest of the span is not needed
  }
  parts.clear();
  carry = ReadaheadCarry{};
  consumer.on_done(std::move(status));
  mu_.lock();
}

void SpanRead::cancel() {
  std::vector<std::shared_ptr<StreamEntry>> entries;
  {
    MutexLock lock(mu_);
    entries = entries_;
  }
  for (const auto& e : entries) e->cancel();
}

uint32_t SpanRead::chunks_held() const {
  MutexLock lock(mu_);
  uint32_t n = 0;
  for (const auto& e : entries_) n += e->chunks_held();
  return n;
}

uint64_t SpanRead::chunks_issued() const {
  MutexLock lock(mu_);
  uint64_t n = 0;
  for (const auto& e : entries_) n += e->chunks_issued();
  return n;
}

}  // namespace tierkv
