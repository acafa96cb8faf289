// StreamEntry: one key of a stream, or one chunk of an object read
// sequentially (readahead.h), read ahead. Its flash read's pieces wait here
// until the consumer comes for them (attach), then go on to the consumer's
// callbacks, in order, clipped to the range it asked for. Internal to
// StreamReader and Readahead.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/mutex.h"
#include "memory/memory_tier.h"
#include "store/store.h"

namespace tierkv {

// A look-ahead value's charge to the memory tier's use-once lane, held
// until the last of its bytes is released (sent, or dropped).
class LaneCharge {
 public:
  LaneCharge(memory::MemoryTier& memory, int64_t bytes) : memory_(memory), bytes_(bytes) {}
  ~LaneCharge() { memory_.uncharge_use_once(bytes_); }
  LaneCharge(const LaneCharge&) = delete;
  LaneCharge& operator=(const LaneCharge&) = delete;

 private:
  memory::MemoryTier& memory_;
  const int64_t bytes_;
};

struct StreamContext;

class StreamEntry final : public FlashRead {
 public:
  // `info` is what the index said when the key was staged: the version
  // the entry stands for (a read that finds another one is not served).
  // The entry holds bytes [offset, offset + length) of the value.
  StreamEntry(std::string key, const ObjectInfo& info, uint64_t offset, uint64_t length,
              std::shared_ptr<LaneCharge> charge, std::function<void()> on_read_done);

  // The entry for bytes [offset, offset + length) of `key`, charged to the
  // use-once lane; null if the lane has no room for it.
  static std::shared_ptr<StreamEntry> make(StreamContext& ctx, std::string key,
                                           const std::optional<ObjectInfo>& info, uint64_t offset,
                                           uint64_t length, std::function<void()> on_read_done);
  // Starts the look-ahead read (no access counted, policy untouched, its
  // chunks one after another); true if it is a flash read.
  static bool start_read(StreamContext& ctx, const std::shared_ptr<StreamEntry>& e);

  const std::string& key() const { return key_; }
  uint64_t offset() const { return offset_; }
  uint64_t length() const { return length_; }
  // The callbacks of the look-ahead read (Store::read of the whole object).
  static FlashReadCallbacks staging_callbacks(const std::shared_ptr<StreamEntry>& self);
  // What Store::read answered. A read that is not kFlash, or of another
  // version, ends here: a consumer already attached is given the memory
  // copy of that version, or an error (NotFound, Conflict).
  void started(ReadStart&& r);
  // False once the look-ahead read is known not to serve the consumer (it
  // found memory, nothing, or another version): then read plainly.
  bool may_serve() const;
  bool read_from_flash() const;
  uint64_t version() const { return version_; }
  uint64_t object_size() const { return object_size_; }
  int64_t expire_at_ms() const { return expire_at_ms_; }

  // The consumer takes the value (the look-ahead read may not even have
  // started): bytes [offset, offset + length) of it go to `consumer`. kHit
  // if the whole value had arrived, kLate if the consumer now waits for the
  // rest, kRefused (consumer untouched) if the look-ahead read turned out
  // not to serve it (may_serve() false): read plainly.
  enum class Attach : uint8_t { kHit, kLate, kRefused };
  Attach attach(uint64_t offset, uint64_t length, FlashReadCallbacks& consumer);
  // Unread: the read stops and what arrived is released.
  void drop();

  // FlashRead, for the consumer that attached.
  void cancel() override;
  uint32_t chunks_held() const override;
  uint64_t chunks_issued() const override;

 private:
  void on_piece(ValuePiece piece);
  void on_done(Status status);
  // Hands what arrived to the consumer, one thread at a time; unlocks
  // while the consumer runs.
  void deliver() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string_view clip(uint64_t at, std::string_view bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void read_done();
  // Ends the value for the consumer without the look-ahead read: the
  // memory copy's segments, or `error`.
  void finish_without_read(ReadStart& r, Status error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string key_;
  const uint64_t offset_;
  const uint64_t length_;
  // shared with every piece handed out
  std::shared_ptr<LaneCharge> charge_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_read_done_;  // once, when the look-ahead read ends

  mutable Mutex mu_;
  const uint64_t version_;
  const uint64_t object_size_;
  const int64_t expire_at_ms_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // the look-ahead read is a flash read of version_
  bool flash_ ABSL_GUARDED_BY(mu_) = false;
  // a read of another version: its pieces are dropped
  bool ignore_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<FlashRead> read_ ABSL_GUARDED_BY(mu_);
  // arrived, not yet handed out
  std::deque<ValuePiece> pieces_ ABSL_GUARDED_BY(mu_);
  uint64_t arrived_ ABSL_GUARDED_BY(mu_) = 0;  // object offset of the next piece
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool done_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool read_done_called_ ABSL_GUARDED_BY(mu_) = false;
  Status status_ ABSL_GUARDED_BY(mu_);
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  bool dropped_ ABSL_GUARDED_BY(mu_) = false;
  // the attached consumer cancelled
  bool cancel_asked_ ABSL_GUARDED_BY(mu_) = false;
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  // Set under mu_ by attach(); deliver() calls it without the lock, which
  // delivering_ makes safe (one deliverer at a time): not annotatable.
  FlashReadCallbacks consumer_;
  uint64_t range_offset_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t range_length_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tierkv
