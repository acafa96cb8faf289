// String commands: GET, SET and its variants, ranges, counters.
//
// Handlers run concurrently on several I/O threads, so every
// read-modify-write (INCR*, APPEND, SETRANGE, ...) is optimistic: read a
// version, compute, then write with WriteCondition::kIfVersion and retry if
// another writer got in between. Expected version 0 means "still absent".
// Counters keep the key's TTL like Redis; SET-like commands replace it.
//
// With a flash tier, GET streams a flash-resident value through the
// connection (ReplyDeferral); the other commands that read values are
// flagged kReadsValue, so their values are in memory when they run; they
// read with Store::read_resident(), which never waits for flash (see
// string_common.h for a value that left memory meanwhile). With
// fsync=always every write is held until durable (hold_until_durable).
// The counters (INCR ...) are in commands_counter.cc.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <absl/container/flat_hash_map.h>

#include "core/clock.h"
#include "server/commands/string_common.h"
#include "store/stream/stream_reader.h"

namespace tierkv::server {

bool can_stream(const CommandContext& ctx) {
  return ctx.defer != nullptr && ctx.store.has_flash();
}

namespace {

// Inside EXEC: the answer is fixed now, and a flash read waits for its turn
// in the reply (ReplyDeferral::queue_stream), so that a batch larger than
// memory is never held in memory whole.
ReadStart held_read(CommandContext& ctx, std::string_view key, uint64_t offset, uint64_t length,
                    bool use_once) {
  ReadOptions options;
  options.use_once = use_once;
  options.count_access = touches(ctx);
  options.hold = true;
  return ctx.store.read(key, offset, length, FlashReadCallbacks{}, options);
}

}  // namespace

void reply_range(CommandContext& ctx, std::string_view key, uint64_t offset, uint64_t length,
                 bool absent_is_null, bool use_once) {
  const bool queued = ctx.defer->queues_streams();
  ReadStart r =
      queued ? held_read(ctx, key, offset, length, use_once)
             : client_read(ctx, key, offset, length, ctx.defer->bulk_stream_callbacks(), use_once);
  switch (r.where) {
    case ReadStart::Where::kAbsent:
      return absent_is_null ? ctx.reply.null() : ctx.reply.bulk(std::string_view{});
    case ReadStart::Where::kMemory:
      return ctx.reply.bulk(r.view);
    case ReadStart::Where::kFlash:
      if (!queued) return ctx.defer->stream_bulk(r.length, std::move(r.flash_read));
      if (r.length == 0) return ctx.reply.bulk(std::string_view{});
      (void)ctx.defer->queue_stream(r.length, std::move(r.held));
      return;
  }
}

namespace {

// ---------------------------------------------------------------------------
// Expiry arguments (Redis's getExpireMillisecondsOrReply)

// Parses an EX/PX/EXAT/PXAT argument into a unix-ms deadline, or replies
// with the error and returns nullopt.
std::optional<int64_t> parse_expire_arg(CommandContext& ctx, std::string_view arg, bool seconds,
                                        bool relative, std::string_view command) {
  std::optional<int64_t> v = parse_int64(arg);
  if (!v) {
    ctx.reply.error(errors::kNotInteger);
    return std::nullopt;
  }
  int64_t ms = *v;
  if (ms <= 0 || (seconds && ms > INT64_MAX / 1000)) {
    ctx.reply.error(errors::invalid_expire(command));
    return std::nullopt;
  }
  if (seconds) ms *= 1000;
  if (relative) {
    int64_t now = unix_time_ms();
    if (ms > INT64_MAX - now) {
      ctx.reply.error(errors::invalid_expire(command));
      return std::nullopt;
    }
    ms += now;
  }
  return ms;
}

enum SetFlag : uint32_t {
  kNx = 1 << 0,
  kXx = 1 << 1,
  kGet = 1 << 2,
  kKeepTtl = 1 << 3,
  kPersist = 1 << 4,
  kEx = 1 << 5,
  kPx = 1 << 6,
  kExAt = 1 << 7,
  kPxAt = 1 << 8,
};
constexpr uint32_t kAnyExpire = kEx | kPx | kExAt | kPxAt;

struct ExtendedArgs {
  uint32_t flags = 0;
  std::string_view expire;
};

// Redis's parseExtendedStringArgumentsOrReply for SET (is_set) and GETEX.
// Note the conflict rules never reject repeating the same option: like Redis,
// "EX 1 EX 2" is accepted and the last value wins.
bool parse_extended_args(CommandContext& ctx, size_t first, bool is_set, ExtendedArgs& out) {
  for (size_t j = first; j < ctx.argc(); ++j) {
    std::string_view opt = ctx.arg(j);
    bool has_next = j + 1 < ctx.argc();
    uint32_t f = out.flags;
    uint32_t expire_flag = 0;
    if (is_set && iequals(opt, "nx") && !(f & kXx)) {
      out.flags |= kNx;
    } else if (is_set && iequals(opt, "xx") && !(f & kNx)) {
      out.flags |= kXx;
    } else if (is_set && iequals(opt, "get")) {
      out.flags |= kGet;
    } else if (is_set && iequals(opt, "keepttl") && !(f & (kPersist | kAnyExpire))) {
      out.flags |= kKeepTtl;
    } else if (!is_set && iequals(opt, "persist") && !(f & (kKeepTtl | kAnyExpire))) {
      out.flags |= kPersist;
    } else if (iequals(opt, "ex")) {
      expire_flag = kEx;
    } else if (iequals(opt, "px")) {
      expire_flag = kPx;
    } else if (iequals(opt, "exat")) {
      expire_flag = kExAt;
    } else if (iequals(opt, "pxat")) {
      expire_flag = kPxAt;
    } else {
      ctx.reply.error(errors::kSyntax);
      return false;
    }
    if (expire_flag != 0) {
      uint32_t conflicts = kKeepTtl | kPersist | (kAnyExpire & ~expire_flag);
      if ((f & conflicts) || !has_next) {
        ctx.reply.error(errors::kSyntax);
        return false;
      }
      out.flags |= expire_flag;
      out.expire = ctx.arg(++j);
    }
  }
  return true;
}

// The deadline the parsed flags ask for (0: none), or nullopt after an error reply.
std::optional<int64_t> expire_deadline(CommandContext& ctx, const ExtendedArgs& a,
                                       std::string_view command) {
  if (!(a.flags & kAnyExpire)) return 0;
  return parse_expire_arg(ctx, a.expire, (a.flags & (kEx | kExAt)) != 0,
                          (a.flags & (kEx | kPx)) != 0, command);
}

// ---------------------------------------------------------------------------
// GET / SET family

void get_command(CommandContext& ctx) {
  // Without flash (or without a connection to stream into) nothing waits.
  if (!can_stream(ctx))
    return reply_view_or_null(
        ctx, ctx.store.read_resident(ctx.arg(1), ResidentRead::whole(touches(ctx))));
  reply_range(ctx, ctx.arg(1), 0, UINT64_MAX, /*absent_is_null=*/true);
}

// A value larger than memory is on its way to flash before SET runs; the old
// value it replaces is not read back for it.
constexpr std::string_view kSetGetPastMemory =
    "ERR SET GET is not supported with a value larger than large-value-memory-fraction of memory";

// SET reads the old value only to return it (GET).
bool set_reads_value(const Invocation& inv) {
  for (size_t i = 3; i < inv.argv.size(); ++i) {
    if (iequals(inv.argv[i], "get")) return true;
  }
  return false;
}

void set_command(CommandContext& ctx) {
  WriteOptions wo;
  uint32_t flags = 0;
  if (ctx.argc() > 3) {
    ExtendedArgs a;
    if (!parse_extended_args(ctx, 3, /*is_set=*/true, a)) return;
    std::optional<int64_t> deadline = expire_deadline(ctx, a, "set");
    if (!deadline) return;
    flags = a.flags;
    wo.expire_at_ms = *deadline;
    wo.keep_ttl = (flags & kKeepTtl) != 0;
    wo.return_previous = (flags & kGet) != 0;
    if (flags & kNx) wo.condition = WriteCondition::kIfAbsent;
    if (flags & kXx) wo.condition = WriteCondition::kIfPresent;
  }
  if (ctx.inv.flash_value) {
    if (flags & kGet) return ctx.reply.error(kSetGetPastMemory);
    return ctx.defer->commit_flash_value(
        {.condition = wo.condition, .expire_at_ms = wo.expire_at_ms, .keep_ttl = wo.keep_ttl});
  }
  // The old value is returned from memory; a flash-only one is fetched first.
  if ((flags & kGet) && awaiting_flash(ctx, ctx.arg(1))) return;
  Result<WriteResult> r = ctx.inv.value_writer
                              ? ctx.store.commit(std::move(*ctx.inv.value_writer), wo)
                              : ctx.store.put(ctx.arg(1), ctx.arg(2), wo);
  if (!r) return ctx.reply.error(r.status());
  hold_until_durable(ctx, ctx.arg(1), *r);
  if (flags & kGet) {
    if (r->previous)
      ctx.reply.bulk(*r->previous);
    else
      ctx.reply.null();
  } else if (r->written) {
    ctx.reply.ok();
  } else {
    ctx.reply.null();
  }
}

void setnx_command(CommandContext& ctx) {
  Result<WriteResult> r =
      ctx.store.put(ctx.arg(1), ctx.arg(2), WriteOptions{.condition = WriteCondition::kIfAbsent});
  if (!r) return ctx.reply.error(r.status());
  hold_until_durable(ctx, ctx.arg(1), *r);
  ctx.reply.integer(r->written ? 1 : 0);
}

void setex_generic(CommandContext& ctx, bool seconds, std::string_view command) {
  std::optional<int64_t> deadline = parse_expire_arg(ctx, ctx.arg(2), seconds, true, command);
  if (!deadline) return;
  Result<WriteResult> r =
      ctx.store.put(ctx.arg(1), ctx.arg(3), WriteOptions{.expire_at_ms = *deadline});
  if (!r) return ctx.reply.error(r.status());
  hold_until_durable(ctx, ctx.arg(1), *r);
  ctx.reply.ok();
}

void setex_command(CommandContext& ctx) {
  setex_generic(ctx, true, "setex");
}
void psetex_command(CommandContext& ctx) {
  setex_generic(ctx, false, "psetex");
}

void getset_command(CommandContext& ctx) {
  if (awaiting_flash(ctx, ctx.arg(1))) return;
  Result<WriteResult> r =
      ctx.store.put(ctx.arg(1), ctx.arg(2), WriteOptions{.return_previous = true});
  if (!r) return ctx.reply.error(r.status());
  hold_until_durable(ctx, ctx.arg(1), *r);
  if (r->previous)
    ctx.reply.bulk(*r->previous);
  else
    ctx.reply.null();
}

void getdel_command(CommandContext& ctx) {
  // Read, then delete that exact version; a concurrent overwrite makes the
  // delete miss and the loop read the new value instead.
  std::string_view key = ctx.arg(1);
  for (;;) {
    Result<ObjectView> v = ctx.store.read_resident(key);
    if (awaiting_flash(ctx, v)) return;
    if (!v) return reply_view_or_null(ctx, v);
    if (ctx.store.remove(key, v->version(), ctx.durable())) return ctx.reply.bulk(*v);
  }
}

void getex_command(CommandContext& ctx) {
  ExtendedArgs a;
  if (!parse_extended_args(ctx, 2, /*is_set=*/false, a)) return;
  std::string_view key = ctx.arg(1);
  Result<ObjectView> v = ctx.store.read_resident(key);
  if (awaiting_flash(ctx, v)) return;
  if (!v) return reply_view_or_null(ctx, v);
  // Like Redis, the expiry value is checked only once the key was found.
  std::optional<int64_t> deadline = expire_deadline(ctx, a, "getex");
  if (!deadline) return;
  if (*deadline != 0) {
    ctx.store.set_expiry(key, *deadline, ctx.durable());
    // A deadline already past deletes the key now, as Redis does.
    if (*deadline <= unix_time_ms()) ctx.store.exists(key);
  } else if (a.flags & kPersist) {
    ctx.store.set_expiry(key, 0, ctx.durable());
  }
  ctx.reply.bulk(*v);
}

void mget_command(CommandContext& ctx) {
  // Every value first: one that left memory means running again later.
  std::vector<Result<ObjectView>> values;
  values.reserve(ctx.argc() - 1);
  for (size_t i = 1; i < ctx.argc(); ++i) {
    values.push_back(ctx.store.read_resident(ctx.arg(i), ResidentRead::whole(touches(ctx))));
    if (awaiting_flash(ctx, values.back())) return;
  }
  ctx.reply.array(values.size());
  for (const Result<ObjectView>& v : values) reply_view_or_null(ctx, v);
}

// MSET and MSETNX are flagged kExclusive: they run holding every I/O
// thread's gate slot (exec_gate.h), so no other client's command sees some
// of their keys written and not the others.
void mset_command(CommandContext& ctx) {
  if (ctx.argc() % 2 != 1) return ctx.reply.error(errors::wrong_arity("mset"));
  for (size_t i = 1; i < ctx.argc(); i += 2) {
    Result<WriteResult> r = ctx.store.put(ctx.arg(i), ctx.arg(i + 1));
    if (!r) return ctx.reply.error(r.status());
    hold_until_durable(ctx, ctx.arg(i), *r);
  }
  ctx.reply.ok();
}

// MSETNX: all keys are checked absent, then each is written with "if
// absent". No client command runs meanwhile (kExclusive), but the store's
// own writers (a preheat job) may create one of the keys in between: then
// the keys this command already wrote are removed again (only if they still
// hold the version written here) and the reply is 0, so the command never
// leaves a partial result behind.
void msetnx_command(CommandContext& ctx) {
  if (ctx.argc() % 2 != 1) return ctx.reply.error(errors::wrong_arity("msetnx"));
  // A key given twice is written once, with its last value (Redis's result).
  std::vector<std::string_view> keys;
  std::vector<size_t> value_index;
  absl::flat_hash_map<std::string_view, size_t> slot;
  for (size_t i = 1; i < ctx.argc(); i += 2) {
    auto [it, inserted] = slot.try_emplace(ctx.arg(i), keys.size());
    if (inserted) {
      keys.push_back(ctx.arg(i));
      value_index.push_back(i + 1);
    } else {
      value_index[it->second] = i + 1;
    }
  }
  for (bool present : ctx.store.exist(keys))
    if (present) return ctx.reply.integer(0);

  std::vector<uint64_t> written_versions;
  written_versions.reserve(keys.size());
  auto rollback = [&] {
    for (size_t i = 0; i < written_versions.size(); ++i)
      ctx.store.remove(keys[i], written_versions[i]);
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    Result<WriteResult> r = ctx.store.put(keys[i], ctx.arg(value_index[i]),
                                          WriteOptions{.condition = WriteCondition::kIfAbsent});
    if (!r) {
      rollback();
      return ctx.reply.error(r.status());
    }
    if (!r->written) {
      rollback();
      return ctx.reply.integer(0);
    }
    written_versions.push_back(r->version);
  }
  if (ctx.defer != nullptr && ctx.store.durable_writes()) {
    for (size_t i = 0; i < keys.size(); ++i) ctx.defer->persist(keys[i], written_versions[i]);
  }
  ctx.reply.integer(1);
}

// ---------------------------------------------------------------------------
// Lengths and ranges

void strlen_command(CommandContext& ctx) {
  // The index knows the size, in either tier.
  std::optional<ObjectInfo> info = ctx.store.stat(ctx.arg(1));
  ctx.reply.integer(info ? static_cast<int64_t>(info->size) : 0);
}

void getrange_command(CommandContext& ctx) {
  std::optional<int64_t> start = parse_int64(ctx.arg(2));
  std::optional<int64_t> end = parse_int64(ctx.arg(3));
  if (!start || !end) return ctx.reply.error(errors::kNotInteger);
  std::string_view key = ctx.arg(1);
  // Redis answers these from the arguments alone: empty, present or not.
  if (*start < 0 && *end < 0 && *start > *end) return ctx.reply.bulk(std::string_view{});
  // Without negative indexes the range needs no length: streamed like GET.
  if (*start >= 0 && *end >= 0 && can_stream(ctx)) {
    if (*start > *end) return ctx.reply.bulk(std::string_view{});
    uint64_t length = static_cast<uint64_t>(*end) - static_cast<uint64_t>(*start) + 1;
    return reply_range(ctx, key, static_cast<uint64_t>(*start), length, false);
  }
  for (;;) {
    // Negative indexes need the length first; the range read must then see
    // the same version, or the clamping would be computed for another value.
    uint64_t expect_version = 0;
    int64_t s = *start, e = *end;
    if (s < 0 || e < 0) {
      Result<ObjectView> probe =
          ctx.store.read_resident(key, ResidentRead::range(0, 0, touches(ctx)));
      if (awaiting_flash(ctx, probe)) return;
      if (!probe) {
        if (probe.status().code() == StatusCode::kNotFound)
          return ctx.reply.bulk(std::string_view{});
        return ctx.reply.error(probe.status());
      }
      int64_t len = static_cast<int64_t>(probe->object_size());
      expect_version = probe->version();
      if (s < 0) s = std::max<int64_t>(len + s, 0);
      if (e < 0) e = std::max<int64_t>(len + e, 0);
    }
    if (s > e) {
      // Empty whatever the length; the key's absence gives the same answer.
      return ctx.reply.bulk(std::string_view{});
    }
    uint64_t length = static_cast<uint64_t>(e) - static_cast<uint64_t>(s) + 1;
    Result<ObjectView> v = ctx.store.read_resident(
        key, ResidentRead::range(static_cast<uint64_t>(s), length, touches(ctx)));
    if (awaiting_flash(ctx, v)) return;
    if (!v) {
      if (v.status().code() == StatusCode::kNotFound) return ctx.reply.bulk(std::string_view{});
      return ctx.reply.error(v.status());
    }
    if (expect_version != 0 && v->version() != expect_version) continue;
    return ctx.reply.bulk(*v);
  }
}

// GETRANGE loads the value into memory first only for negative indexes.
bool getrange_reads_value(const Invocation& inv) {
  std::optional<int64_t> start = parse_int64(inv.argv[2]);
  std::optional<int64_t> end = parse_int64(inv.argv[3]);
  return start && end && (*start < 0 || *end < 0);
}

void setrange_command(CommandContext& ctx) {
  std::optional<int64_t> offset_arg = parse_int64(ctx.arg(2));
  if (!offset_arg) return ctx.reply.error(errors::kNotInteger);
  if (*offset_arg < 0) return ctx.reply.error("ERR offset is out of range");
  std::string_view key = ctx.arg(1);
  std::string_view patch = ctx.arg(3);
  uint64_t offset = static_cast<uint64_t>(*offset_arg);
  uint64_t new_size = 0;
  read_modify_write(
      ctx, key,
      [&](const Result<ObjectView>& old,
          WriteOptions if_unchanged) -> std::optional<Result<WriteResult>> {
        uint64_t old_size = old ? old->object_size() : 0;
        if (patch.empty()) {
          ctx.reply.integer(static_cast<int64_t>(old_size));
          return std::nullopt;
        }
        if (refuse_string_length(ctx, offset + patch.size())) return std::nullopt;
        new_size = std::max(old_size, offset + patch.size());
        Result<ObjectWriter> w = ctx.store.begin_put(key, new_size);
        if (!w) return w.status();
        if (old) append_view_range(*w, *old, 0, std::min(offset, old_size));
        if (offset > old_size) append_zeros(*w, offset - old_size);
        w->append(patch);
        if (old && offset + patch.size() < old_size)
          append_view_range(*w, *old, offset + patch.size(), old_size);
        if_unchanged.raw_encoding = true;
        return ctx.store.commit(std::move(*w), if_unchanged);
      },
      [&] { ctx.reply.integer(static_cast<int64_t>(new_size)); });
}

void append_command(CommandContext& ctx) {
  std::string_view key = ctx.arg(1);
  std::string_view suffix = ctx.arg(2);
  uint64_t new_size = 0;
  read_modify_write(
      ctx, key,
      [&](const Result<ObjectView>& old,
          WriteOptions if_unchanged) -> std::optional<Result<WriteResult>> {
        uint64_t old_size = old ? old->object_size() : 0;
        new_size = old_size + suffix.size();
        if (refuse_string_length(ctx, new_size)) return std::nullopt;
        Result<ObjectWriter> w = ctx.store.begin_put(key, new_size);
        if (!w) return w.status();
        if (old) append_view_range(*w, *old, 0, old_size);
        w->append(suffix);
        // Redis encodes a new key's value as SET does; an existing one it
        // edits in place, which makes it raw.
        if_unchanged.raw_encoding = old.is_ok();
        return ctx.store.commit(std::move(*w), if_unchanged);
      },
      [&] { ctx.reply.integer(static_cast<int64_t>(new_size)); });
}

}  // namespace

void register_string_commands(CommandTable& table) {
  constexpr uint32_t kWriteFast = kWrite | kFast;
  constexpr uint32_t kReadFast = kReadOnly | kFast;
  // Read-modify-write commands: their old values must be in memory first.
  constexpr uint32_t kRmwFast = kWriteFast | kReadsValue;
  table.add({"get", 2, kReadFast | kMayStream, 1, 1, 1, get_command, "Get the value of a key"});
  table.add({"set", -3, kWrite | kStreamsValue | kReadsValue, 1, 1, 1, set_command,
             "Set a key's value, with optional conditions and expiry", 2, set_reads_value});
  table.add({"setnx", 3, kWriteFast, 1, 1, 1, setnx_command, "Set a key only if it is absent"});
  table.add({"setex", 4, kWrite, 1, 1, 1, setex_command, "Set a value with a TTL in seconds"});
  table.add({"psetex", 4, kWrite, 1, 1, 1, psetex_command, "Set a value with a TTL in ms"});
  table.add({"getset", 3, kRmwFast, 1, 1, 1, getset_command, "Set a value, return the old one"});
  table.add({"getdel", 2, kRmwFast, 1, 1, 1, getdel_command, "Get a value and delete the key"});
  table.add({"getex", -2, kRmwFast, 1, 1, 1, getex_command, "Get a value and change its expiry"});
  table.add({"mget", -2, kReadFast | kReadsValue, 1, -1, 1, mget_command,
             "Get the values of several keys"});
  table.add({"mset", -3, kWrite | kExclusive, 1, -1, 2, mset_command, "Set several keys"});
  table.add({"msetnx", -3, kWrite | kExclusive, 1, -1, 2, msetnx_command,
             "Set several keys only if none exists"});
  table.add({"append", 3, kRmwFast, 1, 1, 1, append_command, "Append to a value"});
  table.add({"strlen", 2, kReadFast, 1, 1, 1, strlen_command, "Length of a value"});
  table.add({"getrange", 4, kReadOnly | kReadsValue, 1, 1, 1, getrange_command,
             "Get a substring of a value", 0, getrange_reads_value});
  table.add({"substr", 4, kReadOnly | kReadsValue, 1, 1, 1, getrange_command, "Alias of GETRANGE",
             0, getrange_reads_value});
  table.add({"setrange", 4, kWrite | kReadsValue, 1, 1, 1, setrange_command,
             "Overwrite part of a value at an offset"});
}

}  // namespace tierkv::server
