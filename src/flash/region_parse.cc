#include "flash/region_parse.h"

#include <algorithm>

#include "core/aligned_buffer.h"
#include "flash/flash_index.h"

namespace tierkv::flash {

namespace {

bool all_zero(const char* p, uint64_t n) {
  return std::all_of(p, p + n, [](char c) { return c == 0; });
}
bool zeros_to_block_end(const char* p, uint64_t offset) {
  return all_zero(p, align_up(offset + 1) - offset);
}

}  // namespace

void parse_region(const char* data, uint64_t size, uint64_t region_start, uint32_t region,
                  uint64_t seq, uint64_t salt, RegionScan& out) {
  uint64_t offset = kBlockSize;
  uint64_t end = kBlockSize;
  bool gap = false;          // unreadable bytes since the last good record
  bool gap_counted = false;  // ... already counted as a dropped record
  // ... starting with something where a record was due (a stray byte in
  // padding starts with zeros, and hides no record)
  bool gap_at_record = false;
  while (offset + sizeof(RecordHeader) <= size) {
    const char* p = data + offset;
    const uint64_t left = size - offset;
    if (!is_record_start(p, left, seq)) {
      // Zeros to the block's end are padding (no record starts inside
      // them), not a lost record.
      if (zeros_to_block_end(p, offset)) {
        offset = align_up(offset + 1);
        continue;
      }
      if (!gap) gap_at_record = !all_zero(p, kRecordAlign);
      gap = true;
      offset += kRecordAlign;
      continue;
    }
    Result<RecordView> rec = decode_record(p, left, {salt, region_start + offset});
    if (!rec.is_ok()) {
      ++out.dropped;
      gap = gap_counted = true;
      offset += kRecordAlign;
      continue;
    }
    // A damaged header hides its record; the good record after it shows it.
    if (gap && !gap_counted && gap_at_record) ++out.dropped;
    gap = gap_counted = false;
    out.records.push_back(
        {rec->header, std::string(rec->key),
         location::pack(region, offset, record_length(rec->key.size(), rec->data.size()))});
    offset += record_size(rec->key.size(), rec->data.size());
    end = offset;
  }
  out.fill = end;
  out.tail_gap = gap && gap_at_record && !gap_counted;
}

}  // namespace tierkv::flash
