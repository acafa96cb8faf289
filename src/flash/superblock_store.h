// SuperblockStore: the device's superblock (salt, layout, the index
// snapshot's place) and the region sequence numbers it reserves.
//
// At open it reads the newer of the two slots, or starts a fresh superblock
// with a new salt when there is none of this format and region size (the
// device then starts empty). Every rewrite goes to the other slot with a
// higher generation and is fdatasync'ed, so a torn write leaves the one
// before. Sequence numbers are handed out below the reserved limit, which is
// raised on the device (kSeqLease at a time) before a number past it goes
// out: a number is never handed out twice, even after a crash that lost the
// region header that used it.
//
// Not thread-safe: the tier calls it at open, and then under its write lock.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"
#include "flash/record.h"

namespace tierkv::flash {

class SuperblockStore {
 public:
  SuperblockStore(int fd, uint64_t region_size, uint32_t region_count)
      : fd_(fd), region_size_(region_size), region_count_(region_count) {}

  // Reads the superblock at open (`path` names the device in the log).
  Status load(std::string_view path);
  const Superblock& current() const { return current_; }
  uint64_t salt() const { return current_.salt; }

  // Recovery saw a region with sequence number `seq`: numbers handed out
  // from now on are above it.
  void saw_seq(uint64_t seq) { next_seq_ = std::max(next_seq_, seq + 1); }
  // A rejected snapshot: forget what it said about sequence numbers.
  void forget_seqs() { next_seq_ = 1; }
  // The end of open: numbers continue above the reserved limit (some below
  // it may have gone out unseen before a crash), a new reservation is
  // written, and the snapshot is forgotten (a snapshot is used once).
  Status finish_open();
  // The next region sequence number, reserving more on the device first
  // when the reserved ones are used up.
  Result<uint64_t> take_seq();

  // Records a snapshot written at the device's snapshot area, or drops it.
  Status record_snapshot(uint64_t length, uint64_t checksum);
  Status drop_snapshot() { return record_snapshot(0, 0); }

 private:
  Status rewrite(uint64_t seq_limit);

  const int fd_;
  const uint64_t region_size_;
  const uint32_t region_count_;
  Superblock current_;
  uint64_t slot_ = 0;  // the slot `current_` was read from or last written to
  uint64_t next_seq_ = 1;
};

}  // namespace tierkv::flash
