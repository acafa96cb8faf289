// SpanRead: one consumer read served from a Readahead's look-ahead. Its
// parts come in object order (the rest of the chunk the previous read
// ended in, then chunk entries) and go to the consumer in that order,
// clipped to the range it asked for; the bytes of the last part past the
// range are kept for the next read (the carry). Internal to Readahead.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "store/store.h"
#include "store/stream/stream_entry.h"

namespace tierkv {

// Bytes [offset, end) of one version, already read: pieces contiguous from
// offset, holding their buffers (and lane charge).
struct ReadaheadCarry {
  uint64_t offset = 0;
  uint64_t end = 0;
  std::vector<ValuePiece> pieces;
};

class SpanRead final : public FlashRead, public std::enable_shared_from_this<SpanRead> {
 public:
  using OnCarry = std::function<void(ReadaheadCarry)>;
  // Serves bytes [offset, end) to `consumer`; `on_carry` gets the carry
  // just before the consumer's on_done (a read that ends in an error keeps
  // none).
  SpanRead(uint64_t offset, uint64_t end, FlashReadCallbacks consumer, OnCarry on_carry);

  // The parts, in object order, then go(). An entry that refuses (its read
  // found memory or another version) leaves the span unusable: cancel()
  // it, and nothing reached the consumer.
  void add_carry(ReadaheadCarry carry);
  StreamEntry::Attach add_entry(const std::shared_ptr<StreamEntry>& e);
  void go();
  // Before go(), for a span that cannot be used: the consumer's callbacks
  // back, untouched.
  FlashReadCallbacks release_consumer();

  void cancel() override;
  uint32_t chunks_held() const override;
  uint64_t chunks_issued() const override;

 private:
  struct Part {
    uint64_t at = 0;  // object offset of the next piece
    std::deque<ValuePiece> pieces;
    bool done = false;
    Status status;
  };
  void on_piece(size_t part, ValuePiece piece);
  void on_done(size_t part, Status status);
  // Hands what arrived, in order, to the consumer; one thread at a time,
  // unlocked while the consumer runs.
  void forward() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void keep_tail(uint64_t at, const ValuePiece& piece) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unlocked while the consumer and the carry run.
  void finish(Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t offset_;
  const uint64_t end_;
  OnCarry on_carry_;

  mutable Mutex mu_;
  // Set before go(); forward() calls it without the lock, which
  // delivering_ makes safe (one deliverer at a time): not annotatable.
  FlashReadCallbacks consumer_;
  std::vector<Part> parts_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<StreamEntry>> entries_ ABSL_GUARDED_BY(mu_);
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
  bool going_ ABSL_GUARDED_BY(mu_) = false;
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  ReadaheadCarry carry_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tierkv
