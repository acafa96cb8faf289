#include "flash/superblock_store.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "core/aligned_buffer.h"
#include "flash/exact_io.h"

namespace tierkv::flash {
namespace {

// Region sequence numbers reserved per superblock write: one write per this
// many region openings (64 TiB of data with 64 MiB regions): at run time
// the blocking superblock write practically never happens.
constexpr uint64_t kSeqLease = uint64_t{1} << 20;

uint64_t random_salt() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

}  // namespace

Status SuperblockStore::load(std::string_view path) {
  AlignedBuffer block(kBlockSize);
  std::optional<Superblock> best;
  for (uint64_t slot = 0; slot < kSuperblockSlots; ++slot) {
    TIERKV_RETURN_IF_ERROR(read_exact(fd_, block.data(), kBlockSize, slot * kBlockSize));
    Result<Superblock> sb = decode_superblock(block.data(), kBlockSize);
    if (sb.is_ok() && (!best || sb->generation > best->generation)) {
      best = *sb;
      slot_ = slot;
    }
  }
  if (best && best->region_size == region_size_) {
    current_ = *best;
    if (best->region_count != region_count_) {
      spdlog::info("flash: region count changed from {} to {}", best->region_count, region_count_);
    }
    return Status::ok();
  }
  if (best) {
    spdlog::warn("flash: region size changed from {} to {} bytes: starting empty",
                 best->region_size, region_size_);
  } else {
    spdlog::info("flash: no superblock of format {} on {}: starting empty", kFormatVersion, path);
  }
  current_ = Superblock{};
  current_.salt = random_salt();
  current_.generation = best ? best->generation : 0;
  current_.seq_limit = best ? best->seq_limit : 1;
  slot_ = 1;  // the first write goes to slot 0
  return Status::ok();
}

Status SuperblockStore::finish_open() {
  next_seq_ = std::max(next_seq_, current_.seq_limit);
  current_.snapshot_length = 0;
  current_.snapshot_checksum = 0;
  return rewrite(next_seq_ + kSeqLease);
}

Result<uint64_t> SuperblockStore::take_seq() {
  if (next_seq_ >= current_.seq_limit) TIERKV_RETURN_IF_ERROR(rewrite(next_seq_ + kSeqLease));
  return next_seq_++;
}

Status SuperblockStore::record_snapshot(uint64_t length, uint64_t checksum) {
  current_.snapshot_length = length;
  current_.snapshot_checksum = checksum;
  return rewrite(current_.seq_limit);
}

Status SuperblockStore::rewrite(uint64_t seq_limit) {
  Superblock next = current_;
  next.generation += 1;
  next.region_size = region_size_;
  next.region_count = region_count_;
  next.seq_limit = seq_limit;
  const uint64_t slot = (slot_ + 1) % kSuperblockSlots;
  AlignedBuffer block(kBlockSize);
  encode_superblock(block.data(), next);
  TIERKV_RETURN_IF_ERROR(write_exact(fd_, block.data(), kBlockSize, slot * kBlockSize));
  if (::fdatasync(fd_) != 0) {
    return Status::io_error(std::string("flash: fdatasync of the superblock: ") +
                            std::strerror(errno));
  }
  current_ = next;
  slot_ = slot;
  return Status::ok();
}

}  // namespace tierkv::flash
