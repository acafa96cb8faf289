// RENAME, RENAMENX, COPY [DB db] [REPLACE], with Redis 7.0's replies and TTL
// rules: the destination takes the source's expiry (or none), whatever it
// had before.
//
// These are flagged kExclusive: they run holding every I/O thread's gate
// slot (exec_gate.h), so no client sees the destination written and the
// source still there, or the reverse.
//
// A source in memory is copied once, chunk by chunk, into the destination's
// writer (no intermediate string). A source only flash holds is copied
// flash to flash off the network thread (store/flash_copy.h), whatever its
// size: it never passes through memory, and the exclusion is taken again
// only for the copy's last chunk. Flash records carry their key, so a flash
// record cannot be renamed in place. Inside EXEC, where a command cannot
// wait, the source is fetched into memory before EXEC runs (kReadsValue for
// the source only, value_last_key), so there a source larger than memory
// answers -OOM (docs/commands.md).
#include <string>

#include "server/commands/command.h"
#include "server/commands/string_common.h"

namespace tierkv::server {
namespace {

constexpr std::string_view kNoSuchKey = "ERR no such key";
constexpr std::string_view kSameObject = "ERR source and destination objects are the same";
constexpr std::string_view kDbOutOfRange = "ERR DB index is out of range";

// Writes `src`'s value under `dst` with `src`'s expiry. With `if_absent`,
// only if `dst` does not exist (then `written` is false if it did).
Result<WriteResult> copy_value(CommandContext& ctx, const ObjectView& src, std::string_view dst,
                               bool if_absent) {
  Result<ObjectWriter> w = ctx.store.begin_put(dst, src.length());
  if (!w) return w.status();
  append_view_range(*w, src, 0, src.length());
  WriteOptions wo{.expire_at_ms = src.expire_at_ms()};
  if (if_absent) wo.condition = WriteCondition::kIfAbsent;
  Result<WriteResult> r = ctx.store.commit(std::move(*w), wo);
  if (r) hold_until_durable(ctx, dst, *r);
  return r;
}

bool on_flash_only(const Result<ObjectView>& v) {
  return !v && v.status().code() == StatusCode::kBusy;
}

// The answer of a flash-to-flash RENAME (RENAMENX with `nx`) or COPY.
void reply_flash_copy(ReplyBuffer& reply, const Result<FlashCopyOutcome>& r, bool rename, bool nx) {
  if (!r) return reply.error(r.status());
  bool copied = *r == FlashCopyOutcome::kCopied;
  if (*r == FlashCopyOutcome::kNoSource && rename) return reply.error(kNoSuchKey);
  if (rename && !nx) return reply.ok();  // RENAME never finds its destination in the way
  reply.integer(copied ? 1 : 0);
}

bool copy_flash_source(CommandContext& ctx, std::string_view src, std::string_view dst, bool rename,
                       bool nx_or_no_replace) {
  if (ctx.defer == nullptr) return false;
  FlashCopyRequest request{.source = std::string(src),
                           .destination = std::string(dst),
                           .remove_source = rename,
                           .if_absent = nx_or_no_replace,
                           .durable = false};
  bool nx = rename && nx_or_no_replace;
  return ctx.defer->copy_on_flash(
      std::move(request),
      [rename, nx](ReplyBuffer& reply, const auto& r) { reply_flash_copy(reply, r, rename, nx); });
}

void rename_generic(CommandContext& ctx, bool nx) {
  std::string_view src = ctx.arg(1), dst = ctx.arg(2);
  Result<ObjectView> v = ctx.store.read_resident(src);
  // As Redis: renaming a key to itself changes nothing.
  if (src == dst && (v || on_flash_only(v))) return nx ? ctx.reply.integer(0) : ctx.reply.ok();
  if (on_flash_only(v)) {
    if (nx && ctx.store.exists(dst)) return ctx.reply.integer(0);
    if (copy_flash_source(ctx, src, dst, true, nx)) return;
  }
  // Busy (the value left memory after the fetch) replies nothing: the
  // connection fetches again and reruns the command.
  if (awaiting_flash(ctx, v)) return;
  if (!v) {
    return v.status().code() == StatusCode::kNotFound ? ctx.reply.error(kNoSuchKey)
                                                      : ctx.reply.error(v.status());
  }
  if (src == dst) return nx ? ctx.reply.integer(0) : ctx.reply.ok();
  if (nx && ctx.store.exists(dst)) return ctx.reply.integer(0);
  Result<WriteResult> r = copy_value(ctx, *v, dst, nx);
  if (!r) return ctx.reply.error(r.status());
  if (!r->written) return ctx.reply.integer(0);
  ctx.store.remove(src, v->version(), ctx.durable());
  return nx ? ctx.reply.integer(1) : ctx.reply.ok();
}

void rename_command(CommandContext& ctx) {
  rename_generic(ctx, false);
}
void renamenx_command(CommandContext& ctx) {
  rename_generic(ctx, true);
}

// COPY's options; false after an error reply. Only DB 0 exists here: any
// other index is out of range, as it is in Redis beyond `databases`.
bool parse_copy_options(CommandContext& ctx, bool& replace) {
  for (size_t i = 3; i < ctx.argc(); ++i) {
    if (iequals(ctx.arg(i), "replace")) {
      replace = true;
    } else if (iequals(ctx.arg(i), "db") && i + 1 < ctx.argc()) {
      std::optional<int64_t> db = parse_int64(ctx.arg(++i));
      if (!db || *db < INT32_MIN || *db > INT32_MAX) {
        ctx.reply.error(db ? errors::kIntRange : errors::kNotInteger);
        return false;
      }
      if (*db != 0) {
        ctx.reply.error(kDbOutOfRange);
        return false;
      }
    } else {
      ctx.reply.error(errors::kSyntax);
      return false;
    }
  }
  return true;
}

void copy_command(CommandContext& ctx) {
  bool replace = false;
  if (!parse_copy_options(ctx, replace)) return;
  std::string_view src = ctx.arg(1), dst = ctx.arg(2);
  if (src == dst) return ctx.reply.error(kSameObject);
  Result<ObjectView> v = ctx.store.read_resident(src);
  if (on_flash_only(v)) {
    if (!replace && ctx.store.exists(dst)) return ctx.reply.integer(0);
    if (copy_flash_source(ctx, src, dst, false, !replace)) return;
  }
  if (awaiting_flash(ctx, v)) return;
  if (!v) {
    return v.status().code() == StatusCode::kNotFound ? ctx.reply.integer(0)
                                                      : ctx.reply.error(v.status());
  }
  if (!replace && ctx.store.exists(dst)) return ctx.reply.integer(0);
  Result<WriteResult> r = copy_value(ctx, *v, dst, !replace);
  if (!r) return ctx.reply.error(r.status());
  ctx.reply.integer(r->written ? 1 : 0);
}

}  // namespace

void register_rename_commands(CommandTable& table) {
  constexpr uint32_t kFlags = kWrite | kExclusive | kReadsValue | kCopiesOnFlash;
  table.add({"rename", 3, kFlags, 1, 2, 1, rename_command, "Rename a key", 0, nullptr, nullptr, 1});
  table.add({"renamenx", 3, kFlags | kFast, 1, 2, 1, renamenx_command,
             "Rename a key only if the new name is free", 0, nullptr, nullptr, 1});
  table.add({"copy", -3, kFlags, 1, 2, 1, copy_command, "Copy a key's value and TTL", 0, nullptr,
             nullptr, 1});
}

}  // namespace tierkv::server
