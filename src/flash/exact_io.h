// Positioned reads and writes of exactly `length` bytes, retried over short
// transfers and EINTR: for the superblock, region headers, the snapshot and
// recovery, which do not go through the I/O engine. Internal to the flash
// tier.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace tierkv::flash {

Status read_exact(int fd, char* buf, uint64_t length, uint64_t offset);
Status write_exact(int fd, const char* buf, uint64_t length, uint64_t offset);

}  // namespace tierkv::flash
