// Counters: INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT.
//
// Optimistic read-modify-write, as in commands_string.cc: read a version
// from memory (never waiting for flash; see string_common.h), compute, then
// write with WriteCondition::kIfVersion and retry if another writer got in
// between. Expected version 0 means "still absent". Counters keep the key's
// TTL like Redis.
#include <charconv>
#include <cmath>
#include <string>

#include "server/commands/string_common.h"

namespace tierkv::server {
namespace {

void incr_by(CommandContext& ctx, int64_t delta) {
  std::string_view key = ctx.arg(1);
  int64_t next = 0;
  read_modify_write(
      ctx, key,
      [&](const Result<ObjectView>& old,
          const WriteOptions& if_unchanged) -> std::optional<Result<WriteResult>> {
        int64_t current = 0;
        if (old) {
          char buf[24];
          std::string_view text;
          std::optional<int64_t> parsed;
          if (copy_small(*old, buf, text)) parsed = parse_int64(text);
          if (!parsed) return refuse(ctx, errors::kNotInteger);
          current = *parsed;
        }
        if ((delta < 0 && current < 0 && delta < INT64_MIN - current) ||
            (delta > 0 && current > 0 && delta > INT64_MAX - current))
          return refuse(ctx, errors::kOverflow);
        next = current + delta;
        char out[24];
        char* end = std::to_chars(out, out + sizeof(out), next).ptr;
        return ctx.store.put(key, std::string_view(out, static_cast<size_t>(end - out)),
                             if_unchanged);
      },
      [&] { ctx.reply.integer(next); });
}

void incr_command(CommandContext& ctx) {
  incr_by(ctx, 1);
}
void decr_command(CommandContext& ctx) {
  incr_by(ctx, -1);
}

void incrby_command(CommandContext& ctx) {
  std::optional<int64_t> delta = parse_int64(ctx.arg(2));
  if (!delta) return ctx.reply.error(errors::kNotInteger);
  incr_by(ctx, *delta);
}

void decrby_command(CommandContext& ctx) {
  std::optional<int64_t> delta = parse_int64(ctx.arg(2));
  if (!delta) return ctx.reply.error(errors::kNotInteger);
  if (*delta == INT64_MIN) return ctx.reply.error("ERR decrement would overflow");
  incr_by(ctx, -*delta);
}

// Redis keeps INCRBYFLOAT values as long double text of fewer than
// MAX_LONG_DOUBLE_CHARS bytes; longer values are not floats.
constexpr size_t kMaxLongDoubleChars = 5 * 1024;

void incrbyfloat_command(CommandContext& ctx) {
  std::string_view key = ctx.arg(1);
  std::optional<long double> incr = parse_long_double(ctx.arg(2));
  std::string text;
  read_modify_write(
      ctx, key,
      [&](const Result<ObjectView>& old,
          const WriteOptions& if_unchanged) -> std::optional<Result<WriteResult>> {
        long double current = 0;
        if (old) {
          std::string stored;
          std::optional<long double> parsed;
          if (old->length() < kMaxLongDoubleChars) {
            old->append_to(stored);
            parsed = parse_long_double(stored);
          }
          if (!parsed) return refuse(ctx, errors::kNotFloat);
          current = *parsed;
        }
        // Redis checks the stored value before the increment argument.
        if (!incr) return refuse(ctx, errors::kNotFloat);
        long double next = current + *incr;
        if (std::isnan(next) || std::isinf(next))
          return refuse(ctx, "ERR increment would produce NaN or Infinity");
        text = format_long_double(next);
        return ctx.store.put(key, text, if_unchanged);
      },
      [&] { ctx.reply.bulk(text); });
}

}  // namespace

void register_counter_commands(CommandTable& table) {
  constexpr uint32_t kRmwFast = kWrite | kFast | kReadsValue;
  table.add({"incr", 2, kRmwFast, 1, 1, 1, incr_command, "Increment an integer value by one"});
  table.add({"incrby", 3, kRmwFast, 1, 1, 1, incrby_command, "Increment an integer value"});
  table.add({"decr", 2, kRmwFast, 1, 1, 1, decr_command, "Decrement an integer value by one"});
  table.add({"decrby", 3, kRmwFast, 1, 1, 1, decrby_command, "Decrement an integer value"});
  table.add({"incrbyfloat", 3, kRmwFast, 1, 1, 1, incrbyfloat_command, "Increment a float value"});
}

}  // namespace tierkv::server
