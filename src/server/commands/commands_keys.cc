// Key-space commands: removal, presence, expiry, iteration.
//
// Every value is a string, so TYPE is "string" or "none". Expiry is held by
// the Store as a unix-ms deadline (0: none). Like Redis, setting a deadline
// that has already passed deletes the key at once.
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "cluster/key_slot.h"
#include "core/clock.h"
#include "server/cluster/prefetch_hints.h"
#include "server/commands/command.h"
#include "server/commands/glob.h"
#include "server/commands/key_walk.h"

namespace tierkv::server {
namespace {

std::span<const std::string_view> keys_from(const CommandContext& ctx, size_t first) {
  return std::span<const std::string_view>(ctx.inv.argv).subspan(first);
}

void del_command(CommandContext& ctx) {
  ctx.reply.integer(static_cast<int64_t>(ctx.store.remove_batch(keys_from(ctx, 1), ctx.durable())));
}

void exists_command(CommandContext& ctx) {
  // With exists-prefetch or exists-prefetch-map, a plain EXISTS is also a
  // prefetch signal, for clients that cannot send TIER.EXISTS ... PREFETCH.
  ctx.reply.integer(count_existing(ctx, keys_from(ctx, 1), ctx.store.plain_exists_options()));
}

// TOUCH's read of memory's copy: the 0-byte range, an access that ends a
// prefetch lease, counted by TOUCH itself rather than as a hit or miss.
ResidentRead touch_only() {
  ResidentRead r = ResidentRead::range(0, 0);
  r.counted = false;
  return r;
}

void touch_command(CommandContext& ctx) {
  // A read counts as an access for the eviction policy, which is TOUCH's
  // point. Reading the 0-byte range of a memory object touches it; a
  // flash-only object is only counted (reading it would wait for flash).
  int64_t n = 0;
  for (size_t i = 1; i < ctx.argc(); ++i) {
    std::string_view key = ctx.arg(i);
    if (ctx.store.read_resident(key, touch_only())) {
      ++n;
    } else if (ctx.store.exists(key)) {
      ++n;
    }
  }
  ctx.reply.integer(n);
}

void type_command(CommandContext& ctx) {
  ctx.reply.simple(ctx.store.exists(ctx.arg(1)) ? "string" : "none");
}

// ---------------------------------------------------------------------------
// Expiry

enum ExpireFlag : uint32_t { kNx = 1, kXx = 2, kGt = 4, kLt = 8 };

// Redis's parseExtendedExpireArgumentsOrReply.
bool parse_expire_flags(CommandContext& ctx, uint32_t& flags) {
  for (size_t j = 3; j < ctx.argc(); ++j) {
    std::string_view opt = ctx.arg(j);
    if (iequals(opt, "nx"))
      flags |= kNx;
    else if (iequals(opt, "xx"))
      flags |= kXx;
    else if (iequals(opt, "gt"))
      flags |= kGt;
    else if (iequals(opt, "lt"))
      flags |= kLt;
    else {
      std::string msg = "ERR Unsupported option ";
      msg.append(opt);
      ctx.reply.error(msg);
      return false;
    }
  }
  if ((flags & kNx) && (flags & (kXx | kGt | kLt))) {
    ctx.reply.error("ERR NX and XX, GT or LT options at the same time are not compatible");
    return false;
  }
  if ((flags & kGt) && (flags & kLt)) {
    ctx.reply.error("ERR GT and LT options at the same time are not compatible");
    return false;
  }
  return true;
}

// Whether the NX/XX/GT/LT conditions allow replacing `current` (-1: no TTL) by `when`.
bool expire_condition_holds(uint32_t flags, int64_t current, int64_t when) {
  if ((flags & kNx) && current != -1) return false;
  if ((flags & kXx) && current == -1) return false;
  // No TTL counts as an infinite one: GT never beats it, LT always does.
  if ((flags & kGt) && (current == -1 || when <= current)) return false;
  if ((flags & kLt) && current != -1 && when >= current) return false;
  return true;
}

// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT. The condition check and the update
// are two Store calls: a concurrent EXPIRE on the same key can interleave.
void expire_generic(CommandContext& ctx, bool relative, bool seconds, std::string_view command) {
  uint32_t flags = 0;
  if (!parse_expire_flags(ctx, flags)) return;
  std::optional<int64_t> arg = parse_int64(ctx.arg(2));
  if (!arg) return ctx.reply.error(errors::kNotInteger);
  int64_t when = *arg;
  if (seconds) {
    if (when > INT64_MAX / 1000 || when < INT64_MIN / 1000)
      return ctx.reply.error(errors::invalid_expire(command));
    when *= 1000;
  }
  int64_t now = unix_time_ms();
  int64_t base = relative ? now : 0;
  if (when > INT64_MAX - base) return ctx.reply.error(errors::invalid_expire(command));
  when += base;

  std::string_view key = ctx.arg(1);
  std::optional<ObjectInfo> info = ctx.store.stat(key);
  if (!info) return ctx.reply.integer(0);
  int64_t current = info->expire_at_ms == 0 ? -1 : info->expire_at_ms;
  if (flags != 0 && !expire_condition_holds(flags, current, when)) return ctx.reply.integer(0);
  if (when <= now) {
    ctx.store.remove(key, std::nullopt, ctx.durable());
    return ctx.reply.integer(1);
  }
  ctx.reply.integer(ctx.store.set_expiry(key, when, ctx.durable()) ? 1 : 0);
}

void expire_command(CommandContext& ctx) {
  expire_generic(ctx, true, true, "expire");
}
void pexpire_command(CommandContext& ctx) {
  expire_generic(ctx, true, false, "pexpire");
}
void expireat_command(CommandContext& ctx) {
  expire_generic(ctx, false, true, "expireat");
}
void pexpireat_command(CommandContext& ctx) {
  expire_generic(ctx, false, false, "pexpireat");
}

// TTL, PTTL, and with `absolute` EXPIRETIME, PEXPIRETIME (Unix time of
// expiry), rounded to seconds as Redis does.
void ttl_generic(CommandContext& ctx, bool seconds, bool absolute = false) {
  std::optional<ObjectInfo> info = ctx.store.stat(ctx.arg(1));
  if (!info) return ctx.reply.integer(-2);
  if (info->expire_at_ms == 0) return ctx.reply.integer(-1);
  int64_t ttl = absolute ? static_cast<int64_t>(info->expire_at_ms)
                         : std::max<int64_t>(info->expire_at_ms - unix_time_ms(), 0);
  ctx.reply.integer(seconds ? (ttl + 500) / 1000 : ttl);
}

void ttl_command(CommandContext& ctx) {
  ttl_generic(ctx, true);
}
void pttl_command(CommandContext& ctx) {
  ttl_generic(ctx, false);
}
void expiretime_command(CommandContext& ctx) {
  ttl_generic(ctx, true, true);
}
void pexpiretime_command(CommandContext& ctx) {
  ttl_generic(ctx, false, true);
}

void persist_command(CommandContext& ctx) {
  std::string_view key = ctx.arg(1);
  std::optional<ObjectInfo> info = ctx.store.stat(key);
  if (!info || info->expire_at_ms == 0) return ctx.reply.integer(0);
  ctx.reply.integer(ctx.store.set_expiry(key, 0, ctx.durable()) ? 1 : 0);
}

// ---------------------------------------------------------------------------
// Iteration

// Keys fetched per Store::scan page while KEYS walks the whole key space.
constexpr size_t kKeysPageSize = 1024;

void keys_command(CommandContext& ctx) {
  run_key_walk(ctx, [&store = ctx.store, pattern = std::string(ctx.arg(1))] {
    const bool all = glob_matches_all(pattern);
    std::vector<std::string> matched;
    uint64_t cursor = 0;
    do {
      ScanPage page = store.scan(cursor, kKeysPageSize);
      for (std::string& k : page.keys)
        if (all || glob_match(pattern, k)) matched.push_back(std::move(k));
      cursor = page.next_cursor;
    } while (cursor != 0);
    return [matched = std::move(matched)](ReplyBuffer& reply) {
      reply.array(matched.size());
      for (const std::string& k : matched) reply.bulk(k);
    };
  });
}

// Redis parses cursors with strtoul: no leading space, the whole argument,
// a sign is accepted (and "-1" wraps), the empty string is cursor 0.
std::optional<uint64_t> parse_cursor(std::string_view arg) {
  std::string text(arg);
  if (!text.empty() && std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (*end != '\0' || static_cast<size_t>(end - text.c_str()) != text.size() || errno == ERANGE)
    return std::nullopt;
  return v;
}

void scan_command(CommandContext& ctx) {
  std::optional<uint64_t> cursor = parse_cursor(ctx.arg(1));
  if (!cursor) return ctx.reply.error("ERR invalid cursor");
  int64_t count = 10;
  std::string_view pattern;
  bool use_pattern = false;
  std::optional<std::string_view> type;
  for (size_t i = 2; i < ctx.argc(); i += 2) {
    std::string_view opt = ctx.arg(i);
    bool has_value = i + 1 < ctx.argc();
    if (iequals(opt, "count") && has_value) {
      std::optional<int64_t> n = parse_int64(ctx.arg(i + 1));
      if (!n) return ctx.reply.error(errors::kNotInteger);
      if (*n < 1) return ctx.reply.error(errors::kSyntax);
      count = *n;
    } else if (iequals(opt, "match") && has_value) {
      pattern = ctx.arg(i + 1);
      use_pattern = !glob_matches_all(pattern);
    } else if (iequals(opt, "type") && has_value) {
      type = ctx.arg(i + 1);
    } else {
      return ctx.reply.error(errors::kSyntax);
    }
  }
  // Every key holds a string.
  const bool type_ok = !type || iequals(*type, "string");
  run_key_walk(ctx, [&store = ctx.store, cursor = *cursor, count = static_cast<size_t>(count),
                     pattern = std::string(pattern), use_pattern, type_ok] {
    ScanPage page = store.scan(cursor, count);
    // Filters apply after the fetch, as in Redis: a page can come back
    // empty with a non-zero cursor.
    std::erase_if(page.keys, [&](const std::string& k) {
      return !type_ok || (use_pattern && !glob_match(pattern, k));
    });
    return [page = std::move(page)](ReplyBuffer& reply) {
      reply.array(2);
      reply.bulk(std::to_string(page.next_cursor));
      reply.array(page.keys.size());
      for (const std::string& k : page.keys) reply.bulk(k);
    };
  });
}

void randomkey_command(CommandContext& ctx) {
  run_key_walk(ctx, [&store = ctx.store] {
    return [key = store.random_key()](ReplyBuffer& reply) {
      if (key)
        reply.bulk(*key);
      else
        reply.null();
    };
  });
}

}  // namespace

namespace {

// A companion in a slot another node owns goes to that node as a hint. The
// map is the newest this thread has when the prefetch runs (on this thread,
// now or after the reply): a hint that races a move is only a miss.
void hint_remote_companions(const ServerContext& server, ExistOptions& options) {
  PrefetchHints* hints = server.prefetch_hints();
  const cluster::Member* member = server.cluster();
  if (hints == nullptr || member == nullptr) return;
  options.companion_elsewhere = [member, hints](std::string_view companion) {
    const CachedMap& cached = cached_map(*member);
    if (!cached.map) return false;
    const size_t owner = cached.map->owner(cluster::key_slot(companion));
    if (owner == cached.self || owner == cluster::SlotMap::kNoNode) return false;
    hints->hint(companion, cached.map->nodes()[owner]);
    return true;
  };
}

}  // namespace

int64_t count_existing(CommandContext& ctx, std::span<const std::string_view> keys,
                       const ExistOptions& probe) {
  ExistOptions options = probe;
  if (!options.companion_elsewhere && (options.prefetch_mapped || options.prefetch_to_memory))
    hint_remote_companions(ctx.server, options);
  const bool deferred =
      ctx.defer != nullptr && (options.prefetch_to_memory || options.prefetch_mapped);
  int64_t n = 0;
  for (bool present : ctx.store.exist(keys, deferred ? ExistOptions{} : options))
    n += present ? 1 : 0;
  if (deferred) {
    // The keys live in the input buffer, which the next read may reuse.
    ctx.defer->after_reply(
        [&store = ctx.store, owned = std::vector<std::string>(keys.begin(), keys.end()), options] {
          std::vector<std::string_view> views(owned.begin(), owned.end());
          store.prefetch(views, options);
        });
  }
  return n;
}

void register_key_commands(CommandTable& table) {
  constexpr uint32_t kWriteFast = kWrite | kFast;
  constexpr uint32_t kReadFast = kReadOnly | kFast;
  table.add({"del", -2, kWrite, 1, -1, 1, del_command, "Delete keys"});
  table.add({"unlink", -2, kWriteFast, 1, -1, 1, del_command, "Delete keys"});
  table.add({"exists", -2, kReadFast, 1, -1, 1, exists_command, "Count existing keys"});
  table.add({"touch", -2, kReadFast, 1, -1, 1, touch_command, "Count keys as accessed"});
  table.add({"type", 2, kReadFast, 1, 1, 1, type_command, "The type of a key's value"});
  table.add({"expire", -3, kWriteFast, 1, 1, 1, expire_command, "Set a TTL in seconds"});
  table.add({"pexpire", -3, kWriteFast, 1, 1, 1, pexpire_command, "Set a TTL in milliseconds"});
  table.add({"expireat", -3, kWriteFast, 1, 1, 1, expireat_command,
             "Set an expiry as a unix time in seconds"});
  table.add({"pexpireat", -3, kWriteFast, 1, 1, 1, pexpireat_command,
             "Set an expiry as a unix time in milliseconds"});
  table.add({"ttl", 2, kReadFast, 1, 1, 1, ttl_command, "Remaining TTL in seconds"});
  table.add({"pttl", 2, kReadFast, 1, 1, 1, pttl_command, "Remaining TTL in milliseconds"});
  table.add({"expiretime", 2, kReadFast, 1, 1, 1, expiretime_command,
             "Expiry as a Unix time in seconds"});
  table.add({"pexpiretime", 2, kReadFast, 1, 1, 1, pexpiretime_command,
             "Expiry as a Unix time in milliseconds"});
  table.add({"persist", 2, kWriteFast, 1, 1, 1, persist_command, "Remove a key's expiry"});
  table.add({"keys", 2, kReadOnly, 0, 0, 0, keys_command, "All keys matching a pattern"});
  table.add({"scan", -2, kReadOnly, 0, 0, 0, scan_command, "Iterate over the key space"});
  table.add({"randomkey", 1, kReadOnly, 0, 0, 0, randomkey_command, "A random key"});
}

}  // namespace tierkv::server
