// Parsing one region incarnation's records from its bytes: what recovery
// scans at open, and what a reclaimer round reads to find the chunks of the
// region it takes without walking the whole index.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "flash/record.h"

namespace tierkv::flash {

// A record found in a region: no data (the read path verifies it).
struct ParsedRecord {
  RecordHeader header;
  std::string key;
  uint64_t location = 0;  // location::pack() of the record
};

struct RegionScan {
  std::vector<ParsedRecord> records;
  uint64_t fill = 0;     // bytes up to the end of the last good record
  uint64_t dropped = 0;  // records found damaged (or hidden by damage)
  // Unreadable bytes after the last good record, where a record was due
  // (at recovery, a torn tail).
  bool tail_gap = false;
  Status status;
  bool done = false;
};

// Finds every valid record of incarnation `seq` of `region` in `data` (its
// first `size` bytes, header block included), in log order. The walk
// follows the record chain; over padding, and after a torn or corrupt
// record, it steps kRecordAlign bytes at a time until a record verifies:
// with a salted checksum bound to its offset, only a record we wrote there
// can.
void parse_region(const char* data, uint64_t size, uint64_t region_start, uint32_t region,
                  uint64_t seq, uint64_t salt, RegionScan& out);

}  // namespace tierkv::flash
