// Bit commands on string values: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP.
//
// Redis 7.0's semantics and error texts. Reads use Store::read_resident()
// (the commands are flagged kReadsValue, so flash-only values are fetched
// into memory first; see string_common.h). SETBIT is an optimistic
// read-modify-write like SETRANGE: it writes with WriteCondition::kIfVersion
// and retries if another writer got in between; it keeps the key's TTL.
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "server/commands/string_common.h"

namespace tierkv::server {
namespace {

constexpr std::string_view kBadBitOffset = "ERR bit offset is not an integer or out of range";
// Redis bounds bit offsets by proto-max-bulk-len (512 MiB of bytes, 4 Gi bits).
constexpr uint64_t kMaxBitBytes = uint64_t{512} * 1024 * 1024;

// A bit offset as Redis's getBitOffsetFromArgument parses it (no '#' form).
std::optional<uint64_t> parse_bit_offset(std::string_view arg) {
  std::optional<int64_t> v = parse_int64(arg);
  if (!v || *v < 0 || (static_cast<uint64_t>(*v) >> 3) >= kMaxBitBytes) return std::nullopt;
  return static_cast<uint64_t>(*v);
}

uint8_t byte_at(const ObjectView& view, uint64_t index) {
  uint64_t pos = 0;
  uint8_t out = 0;
  view.for_each_segment([&](std::string_view s) {
    if (index >= pos && index < pos + s.size()) out = static_cast<uint8_t>(s[index - pos]);
    pos += s.size();
  });
  return out;
}

// Reads `key` for a read-only command. False if the handler is done (it
// replied, or waits for flash); `*value` is empty for a missing key.
bool read_value(CommandContext& ctx, std::string_view key, std::optional<ObjectView>* value) {
  Result<ObjectView> v = ctx.store.read_resident(key, ResidentRead::whole(touches(ctx)));
  if (awaiting_flash(ctx, v)) return false;
  if (v) {
    *value = std::move(*v);
  } else if (v.status().code() != StatusCode::kNotFound) {
    ctx.reply.error(v.status());
    return false;
  }
  return true;
}

bool bit_at(const ObjectView& v, uint64_t bit) {
  return (byte_at(v, bit >> 3) >> (7 - (bit & 7))) & 1;
}

// Calls fn(bytes, index of bytes[0]) for the pieces of bytes [from, to) of
// `view`, without copying, until fn returns false.
template <typename Fn>
void for_each_piece(const ObjectView& view, uint64_t from, uint64_t to, Fn&& fn) {
  uint64_t pos = 0;
  bool more = true;
  view.for_each_segment([&](std::string_view s) {
    uint64_t seg_end = pos + s.size();
    if (more && seg_end > from && pos < to) {
      uint64_t a = std::max(pos, from) - pos;
      uint64_t b = std::min(seg_end, to) - pos;
      more = fn(s.substr(a, b - a), pos + a);
    }
    pos = seg_end;
  });
}

void getbit_command(CommandContext& ctx) {
  std::optional<uint64_t> offset = parse_bit_offset(ctx.arg(2));
  if (!offset) return ctx.reply.error(kBadBitOffset);
  std::optional<ObjectView> v;
  if (!read_value(ctx, ctx.arg(1), &v)) return;
  uint64_t byte = *offset >> 3;
  if (!v || byte >= v->object_size()) return ctx.reply.integer(0);
  ctx.reply.integer((byte_at(*v, byte) >> (7 - (*offset & 7))) & 1);
}

void setbit_command(CommandContext& ctx) {
  std::optional<uint64_t> offset = parse_bit_offset(ctx.arg(2));
  if (!offset) return ctx.reply.error(kBadBitOffset);
  std::optional<int64_t> on = parse_int64(ctx.arg(3));
  if (!on || (*on != 0 && *on != 1))
    return ctx.reply.error("ERR bit is not an integer or out of range");
  std::string_view key = ctx.arg(1);
  uint64_t byte = *offset >> 3;
  uint8_t mask = static_cast<uint8_t>(1u << (7 - (*offset & 7)));
  if (exceeds_object_limit(ctx, byte + 1)) return ctx.reply.error(kStringTooLong);
  uint8_t prev = 0;
  read_modify_write(
      ctx, key,
      [&](const Result<ObjectView>& old,
          WriteOptions if_unchanged) -> std::optional<Result<WriteResult>> {
        uint64_t old_size = old ? old->object_size() : 0;
        prev = old && byte < old_size ? byte_at(*old, byte) : 0;
        uint8_t next = *on ? (prev | mask) : (prev & ~mask);
        Result<ObjectWriter> w = ctx.store.begin_put(key, std::max(old_size, byte + 1));
        if (!w) return w.status();
        if (old) append_view_range(*w, *old, 0, std::min(byte, old_size));
        if (byte > old_size) append_zeros(*w, byte - old_size);
        w->append(std::string_view(reinterpret_cast<const char*>(&next), 1));
        if (old && byte + 1 < old_size) append_view_range(*w, *old, byte + 1, old_size);
        if_unchanged.raw_encoding = true;
        return ctx.store.commit(std::move(*w), if_unchanged);
      },
      [&] { ctx.reply.integer((prev & mask) ? 1 : 0); });
}

// A BITCOUNT / BITPOS range resolved to bits [lo, hi] of a value of
// `len` bytes, as Redis resolves it; empty if lo > hi.
struct BitRange {
  int64_t lo = 0, hi = -1;
};

// Redis's index conversion: negative from the end, clamped to the value.
BitRange resolve_range(int64_t start, int64_t end, bool isbit, int64_t len) {
  int64_t total = isbit ? len * 8 : len;
  if (start < 0) start = total + start;
  if (end < 0) end = total + end;
  if (start < 0) start = 0;
  if (end < 0) end = 0;
  if (end >= total) end = total - 1;
  if (start > end) return {};
  return isbit ? BitRange{start, end} : BitRange{start * 8, end * 8 + 7};
}

// Parses the optional BYTE|BIT argument at `i`; false after a syntax error.
bool parse_unit(CommandContext& ctx, size_t i, bool* isbit) {
  if (ctx.argc() <= i) return true;
  if (iequals(ctx.arg(i), "bit")) {
    *isbit = true;
  } else if (!iequals(ctx.arg(i), "byte")) {
    ctx.reply.error(errors::kSyntax);
    return false;
  }
  return true;
}

int64_t popcount_bits(const ObjectView& v, BitRange r) {
  int64_t count = 0;
  int64_t b = r.lo;
  for (; b <= r.hi && (b & 7) != 0; ++b) count += bit_at(v, static_cast<uint64_t>(b));
  int64_t whole_end = b + (r.hi + 1 - b) / 8 * 8;  // whole bytes [b, whole_end) in bits
  for_each_piece(v, static_cast<uint64_t>(b >> 3), static_cast<uint64_t>(whole_end >> 3),
                 [&](std::string_view s, uint64_t) {
                   for (char c : s) count += std::popcount(static_cast<uint8_t>(c));
                   return true;
                 });
  for (b = std::max(b, whole_end); b <= r.hi; ++b) count += bit_at(v, static_cast<uint64_t>(b));
  return count;
}

// The first bit equal to `bit` in the range, or -1.
int64_t find_bit(const ObjectView& v, BitRange r, bool bit) {
  uint8_t skip = bit ? 0x00 : 0xff;  // bytes without a match
  int64_t found = -1;
  for_each_piece(v, static_cast<uint64_t>(r.lo >> 3), static_cast<uint64_t>(r.hi >> 3) + 1,
                 [&](std::string_view s, uint64_t first) {
                   for (size_t i = 0; i < s.size(); ++i) {
                     auto byte = static_cast<uint8_t>(s[i]);
                     if (byte == skip) continue;
                     int64_t base = static_cast<int64_t>(first + i) * 8;
                     for (int k = 0; k < 8; ++k) {
                       int64_t b = base + k;
                       if (b < r.lo || b > r.hi) continue;
                       if (((byte >> (7 - k)) & 1) == bit) {
                         found = b;
                         return false;
                       }
                     }
                   }
                   return true;
                 });
  return found;
}

void bitcount_command(CommandContext& ctx) {
  std::optional<ObjectView> v;
  if (!read_value(ctx, ctx.arg(1), &v)) return;
  if (!v) return ctx.reply.integer(0);  // Redis 7.0 answers 0 before parsing the range
  if (ctx.argc() != 2 && ctx.argc() != 4 && ctx.argc() != 5)
    return ctx.reply.error(errors::kSyntax);
  auto len = static_cast<int64_t>(v->object_size());
  BitRange r{0, len * 8 - 1};
  if (ctx.argc() > 2) {
    std::optional<int64_t> start = parse_int64(ctx.arg(2));
    std::optional<int64_t> end = start ? parse_int64(ctx.arg(3)) : std::nullopt;
    if (!end) return ctx.reply.error(errors::kNotInteger);
    if (*start < 0 && *end < 0 && *start > *end) return ctx.reply.integer(0);
    bool isbit = false;
    if (!parse_unit(ctx, 4, &isbit)) return;
    r = resolve_range(*start, *end, isbit, len);
  }
  ctx.reply.integer(popcount_bits(*v, r));
}

void bitpos_command(CommandContext& ctx) {
  std::optional<int64_t> bit = parse_int64(ctx.arg(2));
  if (!bit) return ctx.reply.error(errors::kNotInteger);
  if (*bit != 0 && *bit != 1) return ctx.reply.error("ERR The bit argument must be 1 or 0.");
  std::optional<ObjectView> v;
  if (!read_value(ctx, ctx.arg(1), &v)) return;
  if (!v) return ctx.reply.integer(*bit ? -1 : 0);
  if (ctx.argc() > 6) return ctx.reply.error(errors::kSyntax);
  auto len = static_cast<int64_t>(v->object_size());
  BitRange r{0, len * 8 - 1};
  bool end_given = ctx.argc() >= 5;
  if (ctx.argc() > 3) {
    std::optional<int64_t> start = parse_int64(ctx.arg(3));
    if (!start) return ctx.reply.error(errors::kNotInteger);
    bool isbit = false;
    if (!parse_unit(ctx, 5, &isbit)) return;
    std::optional<int64_t> end = end_given ? parse_int64(ctx.arg(4)) : std::optional<int64_t>(-1);
    if (!end) return ctx.reply.error(errors::kNotInteger);
    r = resolve_range(*start, *end, isbit, len);
  }
  if (r.lo > r.hi) return ctx.reply.integer(-1);
  int64_t found = find_bit(*v, r, *bit == 1);
  if (found >= 0) return ctx.reply.integer(found);
  // No match: past the end counts as zeros, unless an end was given.
  ctx.reply.integer(*bit == 1 || end_given ? -1 : r.hi + 1);
}

enum class BitOp { kAnd, kOr, kXor, kNot };

std::optional<BitOp> parse_bitop(std::string_view name) {
  if (iequals(name, "and")) return BitOp::kAnd;
  if (iequals(name, "or")) return BitOp::kOr;
  if (iequals(name, "xor")) return BitOp::kXor;
  if (iequals(name, "not")) return BitOp::kNot;
  return std::nullopt;
}

std::string combine(BitOp op, const std::vector<std::string>& srcs, size_t len) {
  std::string out(len, '\0');
  for (size_t i = 0; i < len; ++i) {
    auto at = [&](size_t k) -> uint8_t {
      return i < srcs[k].size() ? static_cast<uint8_t>(srcs[k][i]) : 0;
    };
    uint8_t acc = op == BitOp::kNot ? static_cast<uint8_t>(~at(0)) : at(0);
    for (size_t k = 1; k < srcs.size(); ++k) {
      if (op == BitOp::kAnd) acc &= at(k);
      if (op == BitOp::kOr) acc |= at(k);
      if (op == BitOp::kXor) acc ^= at(k);
    }
    out[i] = static_cast<char>(acc);
  }
  return out;
}

void bitop_command(CommandContext& ctx) {
  std::optional<BitOp> op = parse_bitop(ctx.arg(1));
  if (!op) return ctx.reply.error(errors::kSyntax);
  if (*op == BitOp::kNot && ctx.argc() != 4)
    return ctx.reply.error("ERR BITOP NOT must be called with a single source key.");
  std::vector<std::string> srcs;
  size_t len = 0;
  for (size_t i = 3; i < ctx.argc(); ++i) {
    std::optional<ObjectView> v;
    if (!read_value(ctx, ctx.arg(i), &v)) return;
    srcs.push_back(v ? v->to_string() : std::string());
    len = std::max(len, srcs.back().size());
  }
  std::string_view dest = ctx.arg(2);
  if (len == 0) {
    ctx.store.remove(dest, std::nullopt, ctx.durable());
    return ctx.reply.integer(0);
  }
  Result<WriteResult> r = ctx.store.put(dest, combine(*op, srcs, len), WriteOptions{});
  if (!r) return ctx.reply.error(r.status());
  hold_until_durable(ctx, dest, *r);
  ctx.reply.integer(static_cast<int64_t>(len));
}

}  // namespace

void register_bit_commands(CommandTable& table) {
  constexpr uint32_t kReadValue = kReadOnly | kReadsValue;
  table.add({"setbit", 4, kWrite | kReadsValue, 1, 1, 1, setbit_command,
             "Set or clear one bit of a value"});
  table.add({"getbit", 3, kReadValue | kFast, 1, 1, 1, getbit_command, "One bit of a value"});
  table.add({"bitcount", -2, kReadValue, 1, 1, 1, bitcount_command, "Count the set bits"});
  table.add({"bitpos", -3, kReadValue, 1, 1, 1, bitpos_command, "First set or clear bit"});
  table.add({"bitop", -4, kWrite | kReadsValue, 2, -1, 1, bitop_command,
             "Bitwise AND, OR, XOR or NOT of values into a key"});
}

}  // namespace tierkv::server
