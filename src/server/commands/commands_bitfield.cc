// BITFIELD and BITFIELD_RO: integer fields of any width (i1..i64, u1..u63)
// at any bit offset of a string value, with Redis 7.0's GET/SET/INCRBY,
// OVERFLOW WRAP|SAT|FAIL, '#' positional offsets, limits and error texts.
//
// The whole value is read from memory (kReadsValue fetches flash-only ones
// first), the operations run on a copy, and the result is written back with
// WriteCondition::kIfVersion (retrying if another writer got in between),
// keeping the TTL. Like Redis, a BITFIELD with a write grows the value to
// its highest written bit even if every write fails under OVERFLOW FAIL.
#include <cstdint>
#include <string>
#include <vector>

#include "server/commands/string_common.h"

namespace tierkv::server {
namespace {

enum class Op { kGet, kSet, kIncrBy };
enum class Overflow { kWrap, kSat, kFail };

struct FieldOp {
  Op op;
  Overflow overflow;
  bool sign;
  int bits;
  uint64_t offset;
  int64_t value;
};

constexpr std::string_view kBadType =
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but "
    "i64 is.";
constexpr std::string_view kBadOffset = "ERR bit offset is not an integer or out of range";
constexpr uint64_t kMaxBitBytes = uint64_t{512} * 1024 * 1024;

bool parse_type(std::string_view arg, bool* sign, int* bits) {
  if (arg.empty() || (arg[0] != 'i' && arg[0] != 'u')) return false;
  *sign = arg[0] == 'i';
  std::optional<int64_t> n = parse_int64(arg.substr(1));
  if (!n || *n < 1 || *n > (*sign ? 64 : 63)) return false;
  *bits = static_cast<int>(*n);
  return true;
}

// Redis's getBitOffsetFromArgument with the '#' (times `bits`) form.
std::optional<uint64_t> parse_offset(std::string_view arg, int bits) {
  bool hash = !arg.empty() && arg[0] == '#';
  std::optional<int64_t> v = parse_int64(hash ? arg.substr(1) : arg);
  if (!v) return std::nullopt;
  int64_t off = *v;
  if (hash && __builtin_mul_overflow(off, int64_t{bits}, &off)) return std::nullopt;
  if (off < 0 || (static_cast<uint64_t>(off) >> 3) >= kMaxBitBytes) return std::nullopt;
  return static_cast<uint64_t>(off);
}

// Parses the subcommands; false after replying an error.
bool parse_ops(CommandContext& ctx, std::vector<FieldOp>* ops) {
  Overflow overflow = Overflow::kWrap;
  for (size_t j = 2; j < ctx.argc(); ++j) {
    size_t rem = ctx.argc() - j - 1;
    std::string_view sub = ctx.arg(j);
    Op op;
    if (iequals(sub, "get") && rem >= 2) {
      op = Op::kGet;
    } else if (iequals(sub, "set") && rem >= 3) {
      op = Op::kSet;
    } else if (iequals(sub, "incrby") && rem >= 3) {
      op = Op::kIncrBy;
    } else if (iequals(sub, "overflow") && rem >= 1) {
      std::string_view t = ctx.arg(++j);
      if (iequals(t, "wrap")) {
        overflow = Overflow::kWrap;
      } else if (iequals(t, "sat")) {
        overflow = Overflow::kSat;
      } else if (iequals(t, "fail")) {
        overflow = Overflow::kFail;
      } else {
        ctx.reply.error("ERR Invalid OVERFLOW type specified");
        return false;
      }
      continue;
    } else {
      ctx.reply.error(errors::kSyntax);
      return false;
    }
    FieldOp f{op, overflow, false, 0, 0, 0};
    if (!parse_type(ctx.arg(j + 1), &f.sign, &f.bits)) {
      ctx.reply.error(kBadType);
      return false;
    }
    std::optional<uint64_t> off = parse_offset(ctx.arg(j + 2), f.bits);
    if (!off) {
      ctx.reply.error(kBadOffset);
      return false;
    }
    f.offset = *off;
    if (op != Op::kGet) {
      std::optional<int64_t> v = parse_int64(ctx.arg(j + 3));
      if (!v) {
        ctx.reply.error(errors::kNotInteger);
        return false;
      }
      f.value = *v;
    }
    ops->push_back(f);
    j += op == Op::kGet ? 2 : 3;
  }
  return true;
}

uint64_t get_unsigned(const std::string& s, uint64_t offset, int bits) {
  uint64_t v = 0;
  for (int i = 0; i < bits; ++i, ++offset) {
    uint64_t byte = offset >> 3;
    uint64_t bit = byte < s.size() ? (static_cast<uint8_t>(s[byte]) >> (7 - (offset & 7))) & 1 : 0;
    v = (v << 1) | bit;
  }
  return v;
}

int64_t get_signed(const std::string& s, uint64_t offset, int bits) {
  uint64_t v = get_unsigned(s, offset, bits);
  if (bits < 64 && (v & (uint64_t{1} << (bits - 1)))) v |= ~uint64_t{0} << bits;
  return static_cast<int64_t>(v);
}

void set_unsigned(std::string& s, uint64_t offset, int bits, uint64_t v) {
  for (int i = bits - 1; i >= 0; --i, ++offset) {
    uint8_t mask = static_cast<uint8_t>(1u << (7 - (offset & 7)));
    char& c = s[offset >> 3];
    c = static_cast<char>((v >> i) & 1 ? (c | mask) : (c & ~mask));
  }
}

// Redis's checkSignedBitfieldOverflow: 0, or an overflow with `*limit` the
// wrapped or saturated value.
bool signed_overflow(int64_t value, int64_t incr, int bits, Overflow ow, int64_t* limit) {
  int64_t max = bits == 64 ? INT64_MAX : (int64_t{1} << (bits - 1)) - 1;
  int64_t min = -max - 1;
  auto maxincr = static_cast<int64_t>(static_cast<uint64_t>(max) - static_cast<uint64_t>(value));
  auto minincr = static_cast<int64_t>(static_cast<uint64_t>(min) - static_cast<uint64_t>(value));
  bool high =
      value > max || (bits != 64 && incr > maxincr) || (value >= 0 && incr > 0 && incr > maxincr);
  bool low = !high && (value < min || (bits != 64 && incr < minincr) ||
                       (value < 0 && incr < 0 && incr < minincr));
  if (!high && !low) return false;
  if (ow == Overflow::kSat) *limit = high ? max : min;
  if (ow == Overflow::kWrap) {
    uint64_t c = static_cast<uint64_t>(value) + static_cast<uint64_t>(incr);
    if (bits < 64) {
      uint64_t mask = ~uint64_t{0} << bits;
      c = (c & (uint64_t{1} << (bits - 1))) ? (c | mask) : (c & ~mask);
    }
    *limit = static_cast<int64_t>(c);
  }
  return true;
}

bool unsigned_overflow(uint64_t value, int64_t incr, int bits, Overflow ow, uint64_t* limit) {
  uint64_t max = (uint64_t{1} << bits) - 1;  // bits <= 63
  auto maxincr = static_cast<int64_t>(max - value);
  auto minincr = static_cast<int64_t>(-value);
  bool high = value > max || (incr > 0 && incr > maxincr);
  bool low = !high && incr < 0 && incr < minincr;
  if (!high && !low) return false;
  if (ow == Overflow::kSat) *limit = high ? max : 0;
  if (ow == Overflow::kWrap) *limit = (value + static_cast<uint64_t>(incr)) & max;
  return true;
}

// Runs one SET or INCRBY on `s`: the reply value, or nullopt (FAIL).
std::optional<int64_t> apply_write(std::string& s, const FieldOp& f) {
  bool incr = f.op == Op::kIncrBy;
  if (f.sign) {
    int64_t old = get_signed(s, f.offset, f.bits), lim = 0;
    int64_t next =
        incr ? static_cast<int64_t>(static_cast<uint64_t>(old) + static_cast<uint64_t>(f.value))
             : f.value;
    bool of = incr ? signed_overflow(old, f.value, f.bits, f.overflow, &lim)
                   : signed_overflow(f.value, 0, f.bits, f.overflow, &lim);
    if (of && f.overflow == Overflow::kFail) return std::nullopt;
    if (of) next = lim;
    set_unsigned(s, f.offset, f.bits, static_cast<uint64_t>(next));
    return incr ? next : old;
  }
  uint64_t old = get_unsigned(s, f.offset, f.bits), lim = 0;
  uint64_t next = incr ? old + static_cast<uint64_t>(f.value) : static_cast<uint64_t>(f.value);
  bool of = incr ? unsigned_overflow(old, f.value, f.bits, f.overflow, &lim)
                 : unsigned_overflow(static_cast<uint64_t>(f.value), 0, f.bits, f.overflow, &lim);
  if (of && f.overflow == Overflow::kFail) return std::nullopt;
  if (of) next = lim;
  set_unsigned(s, f.offset, f.bits, next);
  return static_cast<int64_t>(incr ? next : old);
}

std::vector<std::optional<int64_t>> run_ops(std::string& s, const std::vector<FieldOp>& ops) {
  std::vector<std::optional<int64_t>> out;
  for (const FieldOp& f : ops) {
    if (f.op != Op::kGet)
      out.push_back(apply_write(s, f));
    else if (f.sign)
      out.push_back(get_signed(s, f.offset, f.bits));
    else
      out.push_back(static_cast<int64_t>(get_unsigned(s, f.offset, f.bits)));
  }
  return out;
}

void reply_results(CommandContext& ctx, const std::vector<std::optional<int64_t>>& results) {
  ctx.reply.array(results.size());
  for (const std::optional<int64_t>& r : results) {
    if (r)
      ctx.reply.integer(*r);
    else
      ctx.reply.null();
  }
}

void bitfield_generic(CommandContext& ctx, bool readonly_command) {
  std::vector<FieldOp> ops;
  if (!parse_ops(ctx, &ops)) return;
  uint64_t end_byte = 0;  // one past the highest written byte
  for (const FieldOp& f : ops)
    if (f.op != Op::kGet) end_byte = std::max(end_byte, ((f.offset + f.bits - 1) >> 3) + 1);
  if (end_byte > 0 && readonly_command)
    return ctx.reply.error("ERR BITFIELD_RO only supports the GET subcommand");
  if (exceeds_object_limit(ctx, end_byte)) return ctx.reply.error(kStringTooLong);
  std::string_view key = ctx.arg(1);
  std::vector<std::optional<int64_t>> results;
  read_modify_write(
      ctx, key,
      [&](const Result<ObjectView>& old,
          WriteOptions if_unchanged) -> std::optional<Result<WriteResult>> {
        std::string s = old ? old->to_string() : std::string();
        if (s.size() < end_byte) s.resize(end_byte, '\0');
        results = run_ops(s, ops);
        if (end_byte == 0) {  // GETs only: nothing to write
          reply_results(ctx, results);
          return std::nullopt;
        }
        if_unchanged.raw_encoding = true;
        return ctx.store.put(key, s, if_unchanged);
      },
      [&] { reply_results(ctx, results); });
}

void bitfield_command(CommandContext& ctx) {
  bitfield_generic(ctx, false);
}
void bitfield_ro_command(CommandContext& ctx) {
  bitfield_generic(ctx, true);
}

}  // namespace

void register_bitfield_commands(CommandTable& table) {
  table.add({"bitfield", -2, kWrite | kReadsValue, 1, 1, 1, bitfield_command,
             "Get, set or increment integer fields of a value"});
  table.add({"bitfield_ro", -2, kReadOnly | kReadsValue | kFast, 1, 1, 1, bitfield_ro_command,
             "Get integer fields of a value"});
}

}  // namespace tierkv::server
