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

#include "server/string_common.h"

namespace tierkv::server {
namespace {

void incr_by(CommandContext& ctx, int64_t delta) {
  std::string_view key = ctx.arg(1);
  for (;;) {
    Result<ObjectView> old = ctx.store.read_resident(key);
    if (awaiting_flash(ctx, old)) return;
    if (!old && old.status().code() != StatusCode::kNotFound) return ctx.reply.error(old.status());
    int64_t current = 0;
    if (old) {
      char buf[24];
      std::string_view text;
      std::optional<int64_t> parsed;
      if (copy_small(*old, buf, text)) parsed = parse_int64(text);
      if (!parsed) return ctx.reply.error(errors::kNotInteger);
      current = *parsed;
    }
    if ((delta < 0 && current < 0 && delta < INT64_MIN - current) ||
        (delta > 0 && current > 0 && delta > INT64_MAX - current))
      return ctx.reply.error(errors::kOverflow);
    int64_t next = current + delta;
    char out[24];
    char* end = std::to_chars(out, out + sizeof(out), next).ptr;
    Result<WriteResult> r =
        ctx.store.put(key, std::string_view(out, static_cast<size_t>(end - out)),
                      WriteOptions{.condition = WriteCondition::kIfVersion,
                                   .expected_version = old ? old->version() : 0,
                                   .keep_ttl = true});
    if (!r) return ctx.reply.error(r.status());
    hold_until_durable(ctx, key, *r);
    if (r->written) return ctx.reply.integer(next);
  }
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
  for (;;) {
    Result<ObjectView> old = ctx.store.read_resident(key);
    if (awaiting_flash(ctx, old)) return;
    if (!old && old.status().code() != StatusCode::kNotFound) return ctx.reply.error(old.status());
    long double current = 0;
    if (old) {
      std::string text;
      std::optional<long double> parsed;
      if (old->length() < kMaxLongDoubleChars) {
        old->append_to(text);
        parsed = parse_long_double(text);
      }
      if (!parsed) return ctx.reply.error(errors::kNotFloat);
      current = *parsed;
    }
    // Redis checks the stored value before the increment argument.
    if (!incr) return ctx.reply.error(errors::kNotFloat);
    long double next = current + *incr;
    if (std::isnan(next) || std::isinf(next))
      return ctx.reply.error("ERR increment would produce NaN or Infinity");
    std::string text = format_long_double(next);
    Result<WriteResult> r = ctx.store.put(key, text,
                                          WriteOptions{.condition = WriteCondition::kIfVersion,
                                                       .expected_version = old ? old->version() : 0,
                                                       .keep_ttl = true});
    if (!r) return ctx.reply.error(r.status());
    hold_until_durable(ctx, key, *r);
    if (r->written) return ctx.reply.bulk(text);
  }
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
