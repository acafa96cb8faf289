// OBJECT ENCODING/FREQ/IDLETIME/REFCOUNT/HELP, MEMORY USAGE/HELP and WAIT,
// with Redis 7.0's replies where tierkv has the same facts, and the nearest
// honest answer where it does not (docs/commands.md lists them).
#include <fmt/format.h>

#include <climits>
#include <iterator>
#include <string>

#include "server/commands/command.h"
#include "server/commands/string_common.h"

namespace tierkv::server {
namespace {

// Redis's tryObjectEncoding: a value that string2l parses is "int" (and an
// integer in 0..9999 is a shared object), one of at most 44 bytes "embstr",
// anything longer "raw". A value edited in place (APPEND, SETRANGE, SETBIT,
// BITFIELD) is "raw" whatever it holds, while memory keeps it.
constexpr uint64_t kMaxIntLength = 20;
constexpr uint64_t kEmbstrLimit = 44;
constexpr int64_t kSharedIntegers = 10000;
constexpr int64_t kSharedRefcount = INT_MAX;  // OBJ_SHARED_REFCOUNT

struct Encoding {
  std::string_view name;
  bool shared = false;
};

// The encoding of `key`'s value, or nullopt after a reply (null for a missing
// key, or nothing if a small flash-only value is being fetched: the
// connection reruns the command).
std::optional<Encoding> encoding_of(CommandContext& ctx, std::string_view key) {
  std::optional<ObjectInfo> info = ctx.store.stat(key);
  if (!info) {
    ctx.reply.null();
    return std::nullopt;
  }
  if (info->raw_encoding) return Encoding{"raw"};
  if (info->size > kMaxIntLength) return Encoding{info->size > kEmbstrLimit ? "raw" : "embstr"};
  // Short enough to be a number: the bytes decide.
  // Redis's OBJECT looks keys up without touching them.
  Result<ObjectView> v = ctx.store.read_resident(key, ResidentRead::whole(/*touch=*/false));
  if (awaiting_flash(ctx, v)) return std::nullopt;
  if (!v) {
    reply_view_or_null(ctx, v);
    return std::nullopt;
  }
  char buf[kMaxIntLength + 2];
  std::string_view text;
  std::optional<int64_t> n = copy_small(*v, buf, text) ? parse_int64(text) : std::nullopt;
  if (!n) return Encoding{"embstr"};
  return Encoding{"int", *n >= 0 && *n < kSharedIntegers};
}

void object_help(CommandContext& ctx) {
  static constexpr std::string_view kLines[] = {
      "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
      "ENCODING <key>",
      "    Return the kind of internal representation used in order to store the value",
      "    associated with a <key>.",
      "FREQ <key>",
      "    Return the access frequency index of the <key>. The returned integer is",
      "    proportional to the logarithm of the recent access frequency of the key.",
      "IDLETIME <key>",
      "    Return the idle time of the <key>, that is the approximated number of",
      "    seconds elapsed since the last access to the key.",
      "REFCOUNT <key>",
      "    Return the number of references of the value associated with the specified",
      "    <key>.",
      "HELP",
      "    Prints this help."};
  ctx.reply.array(std::size(kLines));
  for (std::string_view line : kLines) ctx.reply.simple(line);
}

// Redis answers per subcommand, with the arity error naming "object|sub".
bool subcommand_arity(CommandContext& ctx, std::string_view sub, size_t argc) {
  if (ctx.argc() == argc) return true;
  ctx.reply.error(fmt::format("ERR wrong number of arguments for 'object|{}' command", sub));
  return false;
}

void object_command(CommandContext& ctx) {
  std::string_view sub = ctx.arg(1);
  if (iequals(sub, "help")) {
    if (subcommand_arity(ctx, "help", 2)) object_help(ctx);
  } else if (iequals(sub, "encoding")) {
    if (!subcommand_arity(ctx, "encoding", 3)) return;
    if (std::optional<Encoding> e = encoding_of(ctx, ctx.arg(2))) ctx.reply.bulk(e->name);
  } else if (iequals(sub, "refcount")) {
    if (!subcommand_arity(ctx, "refcount", 3)) return;
    if (std::optional<Encoding> e = encoding_of(ctx, ctx.arg(2)))
      ctx.reply.integer(e->shared ? kSharedRefcount : 1);
  } else if (iequals(sub, "freq")) {
    if (!subcommand_arity(ctx, "freq", 3)) return;
    // Redis tracks it only under an LFU policy; tierkv's policies are not
    // LFU, so this is Redis's answer for them.
    if (!ctx.store.stat(ctx.arg(2))) return ctx.reply.null();
    ctx.reply.error(
        "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note "
        "that when switching between policies at runtime LRU and LFU data will take some time to "
        "adjust.");
  } else if (iequals(sub, "idletime")) {
    if (!subcommand_arity(ctx, "idletime", 3)) return;
    // No per-object access clock is kept: 0 (docs/commands.md).
    if (!ctx.store.stat(ctx.arg(2))) return ctx.reply.null();
    ctx.reply.integer(0);
  } else {
    ctx.reply.error(fmt::format("ERR unknown subcommand '{}'. Try OBJECT HELP.", sub));
  }
}

// What tierkv charges for an object besides its bytes: its index entry and
// chunk header (an estimate, as Redis's MEMORY USAGE is).
constexpr int64_t kObjectOverhead = 64;

void memory_usage(CommandContext& ctx) {
  for (size_t i = 3; i < ctx.argc(); ++i) {
    if (!iequals(ctx.arg(i), "samples") || i + 1 >= ctx.argc())
      return ctx.reply.error(errors::kSyntax);
    if (!parse_int64(ctx.arg(++i))) return ctx.reply.error(errors::kNotInteger);
  }
  std::optional<ObjectInfo> info = ctx.store.stat(ctx.arg(2));
  if (!info) return ctx.reply.null();
  ctx.reply.integer(static_cast<int64_t>(info->size + ctx.arg(2).size()) + kObjectOverhead);
}

void memory_command(CommandContext& ctx) {
  std::string_view sub = ctx.arg(1);
  if (iequals(sub, "usage")) {
    if (ctx.argc() < 3)
      return ctx.reply.error("ERR wrong number of arguments for 'memory|usage' command");
    return memory_usage(ctx);
  }
  if (iequals(sub, "help") && ctx.argc() == 2) {
    ctx.reply.array(5);
    ctx.reply.simple("MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:");
    ctx.reply.simple("USAGE <key> [SAMPLES <count>]");
    ctx.reply.simple("    Return memory in bytes used by <key> and its value (an estimate).");
    ctx.reply.simple("HELP");
    ctx.reply.simple("    Prints this help.");
    return;
  }
  ctx.reply.error(fmt::format("ERR unknown subcommand '{}'. Try MEMORY HELP.", sub));
}

// WAIT numreplicas timeout: there are no replicas, so 0 at once (Redis
// would wait for the timeout when asked for more replicas than it has).
void wait_command(CommandContext& ctx) {
  if (!parse_int64(ctx.arg(1))) return ctx.reply.error(errors::kNotInteger);
  std::optional<int64_t> timeout = parse_int64(ctx.arg(2));
  if (!timeout) return ctx.reply.error("ERR timeout is not an integer or out of range");
  if (*timeout < 0) return ctx.reply.error("ERR timeout is negative");
  ctx.reply.integer(0);
}

}  // namespace

void register_object_commands(CommandTable& table) {
  table.add({"object", -2, kReadOnly, 2, 2, 1, object_command, "Inspect a key's value"});
  table.add({"memory", -2, kReadOnly, 0, 0, 0, memory_command, "Memory used by a key"});
  table.add({"wait", 3, 0, 0, 0, 0, wait_command, "Wait for replicas (there are none: 0)"});
}

}  // namespace tierkv::server
