#include "cli/trace/trace_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

namespace tierkv::trace {
namespace {

constexpr size_t kOracleRecord = 24;  // uint32 ts, uint64 id, uint32 size, int64 next

uint64_t load_le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint32_t load_be32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint64_t load_be64(const char* p) {
  return (uint64_t{load_be32(p)} << 32) | load_be32(p + 4);
}

// Telling big-endian int32 words from int64 words. Read as 32-bit words, an
// int64 trace alternates high and low halves: words at even positions come
// from another distribution than words at odd positions, and a value seen
// at one parity is not seen at the other. A real int32 trace is the same at
// both parities, and its keys, when they repeat, land on either. So:
//  * a length that is not a multiple of 8 is int32;
//  * one parity with far fewer distinct values than the other (the high
//    halves of keys below 2^32 are all 0) is int64;
//  * values that recur across parities are int32;
//  * otherwise, 64-bit values that repeat (a cache trace reuses keys) with
//    no value crossing parities is int64;
//  * anything else (too short, or no key repeats) cannot be told apart.
constexpr size_t kGuessWords = size_t{1} << 20;  // sampled 32-bit words
constexpr size_t kMinGuessWords = 64;

enum class WordSize : uint8_t { k32, k64, kUnknown };

WordSize guess_word_size(std::string_view bytes) {
  if (bytes.size() % 8 != 0) return WordSize::k32;
  size_t n = std::min(bytes.size() / 4, kGuessWords);
  std::unordered_set<uint32_t> even, odd;
  std::unordered_set<uint64_t> pairs;
  for (size_t i = 0; i + 1 < n; i += 2) {
    even.insert(load_be32(&bytes[4 * i]));
    odd.insert(load_be32(&bytes[4 * i + 4]));
    pairs.insert(load_be64(&bytes[4 * i]));
  }
  if (even.size() * 8 <= odd.size() && odd.size() >= 8) return WordSize::k64;
  if (n < kMinGuessWords) return WordSize::k32;  // too few words to tell; the old rule
  size_t crossing = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t w = load_be32(&bytes[4 * i]);
    crossing += (i % 2 == 0 ? odd.count(w) : even.count(w));
  }
  if (crossing * 20 >= n) return WordSize::k32;  // 5% of the words recur across parities
  if (pairs.size() * 20 <= (n / 2) * 19) return WordSize::k64;  // 5% of the keys repeat
  return WordSize::kUnknown;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Splits on '\n' and calls fn(line_number, line) for every line; stops at
// the first error fn returns.
template <typename Fn>
Status for_each_line(std::string_view text, Fn fn) {
  size_t line_no = 0;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    TIERKV_RETURN_IF_ERROR(fn(++line_no, trim(line)));
  }
  return Status::ok();
}

// Parses the next whitespace-separated unsigned decimal from `s`.
std::optional<uint64_t> next_number(std::string_view& s) {
  s = trim(s);
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || (ptr != s.data() + s.size() && !is_space(*ptr))) return std::nullopt;
  s.remove_prefix(static_cast<size_t>(ptr - s.data()));
  return v;
}

Status bad_line(std::string_view what, size_t line_no, std::string_view line) {
  // Binary data fed to a text parser must not garble a one-line error.
  std::string shown(line.substr(0, std::min<size_t>(line.size(), 60)));
  for (char& c : shown) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return Status::corruption(fmt::format("{} line {}: '{}'", what, line_no, shown));
}

}  // namespace

std::string_view format_name(TraceFormat format) {
  switch (format) {
    case TraceFormat::kOracleGeneral:
      return "oracle";
    case TraceFormat::kLis:
      return "lis";
    case TraceFormat::kInt32BigEndian:
      return "int32be";
    case TraceFormat::kInt64BigEndian:
      return "int64be";
    case TraceFormat::kLines:
      return "lines";
  }
  return "unknown";
}

std::optional<TraceFormat> parse_format(std::string_view name) {
  for (TraceFormat f :
       {TraceFormat::kOracleGeneral, TraceFormat::kLis, TraceFormat::kInt32BigEndian,
        TraceFormat::kInt64BigEndian, TraceFormat::kLines}) {
    if (format_name(f) == name) return f;
  }
  return std::nullopt;
}

Result<std::vector<uint64_t>> parse_oracle_general(std::string_view bytes) {
  if (bytes.size() % kOracleRecord != 0)
    return Status::corruption(fmt::format(
        "oracleGeneral: {} bytes is not a whole number of 24-byte records", bytes.size()));
  std::vector<uint64_t> ids;
  ids.reserve(bytes.size() / kOracleRecord);
  for (size_t off = 0; off < bytes.size(); off += kOracleRecord)
    ids.push_back(load_le64(&bytes[off + 4]));
  return ids;
}

Result<std::vector<uint64_t>> parse_lis(std::string_view text) {
  std::vector<uint64_t> ids;
  Status st = for_each_line(text, [&](size_t line_no, std::string_view line) {
    if (line.empty()) return Status::ok();
    std::string_view rest = line;
    std::optional<uint64_t> start = next_number(rest);
    std::optional<uint64_t> count = next_number(rest);
    if (!start || !count) return bad_line("lis", line_no, line);
    // One line stands for `count` consecutive page requests.
    for (uint64_t i = 0; i < *count; ++i) ids.push_back(*start + i);
    return Status::ok();
  });
  if (!st) return st;
  return ids;
}

namespace {

// Big-endian words of `width` bytes (4 or 8), one id each.
Result<std::vector<uint64_t>> parse_big_endian_words(std::string_view bytes, size_t width) {
  if (bytes.size() % width != 0)
    return Status::corruption(
        fmt::format("int{}be: {} bytes is not a whole number of {}-byte records", 8 * width,
                    bytes.size(), width));
  std::vector<uint64_t> ids;
  ids.reserve(bytes.size() / width);
  for (size_t off = 0; off < bytes.size(); off += width)
    ids.push_back(width == 8 ? load_be64(&bytes[off]) : load_be32(&bytes[off]));
  return ids;
}

}  // namespace

Result<std::vector<uint64_t>> parse_int32_big_endian(std::string_view bytes) {
  return parse_big_endian_words(bytes, 4);
}

Result<std::vector<uint64_t>> parse_int64_big_endian(std::string_view bytes) {
  return parse_big_endian_words(bytes, 8);
}

Result<std::vector<uint64_t>> parse_lines(std::string_view text) {
  std::vector<uint64_t> ids;
  Status st = for_each_line(text, [&](size_t line_no, std::string_view line) {
    if (line.empty() || line == "*") return Status::ok();
    std::string_view rest = line;
    std::optional<uint64_t> id = next_number(rest);
    if (!id || !trim(rest).empty()) return bad_line("lines", line_no, line);
    ids.push_back(*id);
    return Status::ok();
  });
  if (!st) return st;
  return ids;
}

Result<std::vector<uint64_t>> parse_trace(std::string_view bytes, TraceFormat format) {
  switch (format) {
    case TraceFormat::kOracleGeneral:
      return parse_oracle_general(bytes);
    case TraceFormat::kLis:
      return parse_lis(bytes);
    case TraceFormat::kInt32BigEndian:
      return parse_int32_big_endian(bytes);
    case TraceFormat::kInt64BigEndian:
      return parse_int64_big_endian(bytes);
    case TraceFormat::kLines:
      return parse_lines(bytes);
  }
  return Status::invalid_argument("unknown trace format");
}

Result<TraceFormat> guess_format(std::string_view file_name, std::string_view bytes) {
  if (file_name.find(".oracleGeneral") != std::string_view::npos)
    return TraceFormat::kOracleGeneral;
  if (file_name.find(".lis") != std::string_view::npos) return TraceFormat::kLis;
  bool text = std::all_of(bytes.begin(), bytes.end(),
                          [](char c) { return (c >= '0' && c <= '9') || c == '*' || is_space(c); });
  if (text) return TraceFormat::kLines;
  switch (guess_word_size(bytes)) {
    case WordSize::k32:
      return TraceFormat::kInt32BigEndian;
    case WordSize::k64:
      return TraceFormat::kInt64BigEndian;
    case WordSize::kUnknown:
      break;
  }
  return Status::invalid_argument(
      "cannot tell big-endian 32-bit from 64-bit keys (no key repeats in the words sampled); "
      "pass --format int32be or --format int64be");
}

Result<Trace> read_trace(const std::string& path, std::optional<TraceFormat> format) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(fmt::format("cannot open trace '{}'", path));
  std::ostringstream raw;
  raw << in.rdbuf();
  if (in.bad()) return Status::io_error(fmt::format("cannot read trace '{}'", path));
  Result<std::string> bytes = decompress(std::move(raw).str());
  if (!bytes)
    return Status(bytes.status().code(), fmt::format("{}: {}", path, bytes.status().message()));
  std::string file_name = std::filesystem::path(path).filename().string();
  Result<TraceFormat> f = format ? Result<TraceFormat>(*format) : guess_format(file_name, *bytes);
  if (!f) return Status(f.status().code(), fmt::format("{}: {}", path, f.status().message()));
  Result<std::vector<uint64_t>> ids = parse_trace(*bytes, *f);
  if (!ids) return Status(ids.status().code(), fmt::format("{}: {}", path, ids.status().message()));
  if (ids->empty()) return Status::invalid_argument(fmt::format("{}: trace has no requests", path));
  Trace t;
  t.name = file_name.substr(0, file_name.find('.'));
  t.ids = std::move(*ids);
  return t;
}

}  // namespace tierkv::trace
