// Readers for the shared cache traces (/work/shared/traces/README.md).
//
// A trace becomes a sequence of 64-bit object ids, one per request. Object
// sizes and timestamps are dropped: the replay counts objects, not bytes.
// Compressed files (zstd, xz, gzip) are recognised by their magic bytes and
// decompressed in memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tierkv::trace {

enum class TraceFormat : uint8_t {
  kOracleGeneral,   // libCacheSim: packed 24-byte little-endian records
  kLis,             // ARC traces: "start count ignore reqno" text lines
  kInt32BigEndian,  // cache2k: one big-endian int32 per request
  kInt64BigEndian,  // Caffeine's simulator (scarab, ...): one big-endian int64 per request
  kLines,           // LIRS traces: one decimal id per line, '*' = marker
};

std::string_view format_name(TraceFormat format);
std::optional<TraceFormat> parse_format(std::string_view name);

struct Trace {
  std::string name;           // file name up to the first '.'
  std::vector<uint64_t> ids;  // one per request
};

// Parsers over already-decompressed bytes.
Result<std::vector<uint64_t>> parse_oracle_general(std::string_view bytes);
Result<std::vector<uint64_t>> parse_lis(std::string_view text);
Result<std::vector<uint64_t>> parse_int32_big_endian(std::string_view bytes);
Result<std::vector<uint64_t>> parse_int64_big_endian(std::string_view bytes);
Result<std::vector<uint64_t>> parse_lines(std::string_view text);
Result<std::vector<uint64_t>> parse_trace(std::string_view bytes, TraceFormat format);

// Decompresses zstd, xz or gzip data (by magic bytes); other data is
// returned unchanged.
Result<std::string> decompress(std::string bytes);

// The format a file name implies (".oracleGeneral", ".lis"); for other
// names the decompressed content decides: text of digits and '*' lines is
// kLines; binary data is kInt32BigEndian or kInt64BigEndian, told apart by
// the words' statistics (see guess_word_size in trace_reader.cc). Binary
// data that could be either is an error asking for --format, never a
// silent guess.
Result<TraceFormat> guess_format(std::string_view file_name, std::string_view bytes);

// Reads, decompresses and parses one trace file. `format` overrides the guess.
Result<Trace> read_trace(const std::string& path, std::optional<TraceFormat> format = {});

}  // namespace tierkv::trace
