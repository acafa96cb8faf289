// TIER.* commands: tierkv extensions that expose where an object lives.
//
//   TIER.STAT key                      -> map, or null if the key is absent:
//     size, version, chunks, ttl_ms, state (dirty | flushing | clean |
//     offloading in memory, flash if only flash holds it), and per chunk
//     index, bytes, residency (memory | flash | both), dirty, pins, leased,
//     use_once
//   TIER.EXISTS key [key ...] [PREFIX] [PREFETCH] -> count of present keys;
//     with PREFIX, the length of the leading run of present keys (a
//     KV-cache prefix lookup in one round trip instead of one per chunk)
//   TIER.GET key [FROM memory|any] [WITHIN ms] -> the value, or null if
//     absent, or (a bounded miss) if FROM memory finds it only on flash, or
//     if WITHIN's bound passes before flash brought it into memory
//
//   TIER.PREFETCH key [key ...] -> how many of the keys this node holds (in
//     cluster mode, among those of the slots it owns); each held only on
//     flash is prefetched, as by TIER.EXISTS ... PREFETCH
//
// TIER.PREFETCH is how nodes hint each other (prefetch_hints.h). Its keys
// are hints, not routed: keys of slots another node owns are ignored, not
// refused, and no exists-prefetch-map companion of them is prefetched.
//
// TIER.GET is for an engine that would rather recompute than wait: it
// never waits past its bound. FROM memory never reads flash and starts
// nothing; WITHIN fetches the value into memory and the fetch goes on
// past a miss, so that the next request finds it there. Without options
// it is GET.
// TIER.EXISTS with PREFETCH is the KV-cache probe: "is it there, and I am
// about to read it". With PREFIX only the keys of the leading run are
// prefetched. The answer never waits for the prefetch.
#include <algorithm>
#include <span>

#include "cluster/key_slot.h"
#include "core/clock.h"
#include "server/cluster/prefetch_hints.h"
#include "server/commands/command.h"
#include "server/commands/string_common.h"

namespace tierkv::server {
namespace {

std::string_view residency_name(const ChunkResidency& c) {
  if (c.in_memory && c.on_flash) return "both";
  return c.in_memory ? "memory" : "flash";
}

void reply_chunk(ReplyBuffer& reply, const ChunkResidency& c) {
  reply.map(7);
  reply.bulk("index");
  reply.integer(c.index);
  reply.bulk("bytes");
  reply.integer(c.size);
  reply.bulk("residency");
  reply.bulk(residency_name(c));
  // In memory and not on flash at this version: lost if evicted unwritten.
  reply.bulk("dirty");
  reply.boolean(c.in_memory && !c.on_flash);
  reply.bulk("pins");
  reply.integer(c.pins);
  reply.bulk("leased");
  reply.boolean(c.leased);
  reply.bulk("use_once");
  reply.boolean(c.use_once);
}

void tier_stat_command(CommandContext& ctx) {
  std::optional<ObjectResidency> r = ctx.store.residency(ctx.arg(1));
  if (!r) return ctx.reply.null();
  int64_t ttl_ms = -1;
  if (r->expire_at_ms != 0) ttl_ms = std::max<int64_t>(r->expire_at_ms - unix_time_ms(), 0);
  ctx.reply.map(6);
  ctx.reply.bulk("size");
  ctx.reply.integer(static_cast<int64_t>(r->size));
  ctx.reply.bulk("version");
  ctx.reply.integer(static_cast<int64_t>(r->version));
  ctx.reply.bulk("chunks");
  ctx.reply.integer(static_cast<int64_t>(r->chunks.size()));
  ctx.reply.bulk("ttl_ms");
  ctx.reply.integer(ttl_ms);
  ctx.reply.bulk("state");
  ctx.reply.bulk(r->state);
  ctx.reply.bulk("chunk_residency");
  ctx.reply.array(r->chunks.size());
  for (const ChunkResidency& c : r->chunks) reply_chunk(ctx.reply, c);
}

struct ExistsCall {
  size_t keys_end;
  bool prefix = false, prefetch = false;
};

// Trailing PREFIX and PREFETCH (in either order) are options, not keys,
// while at least one key precedes them.
ExistsCall parse_exists(std::span<const std::string_view> argv) {
  ExistsCall call{argv.size()};
  for (int i = 0; i < 2 && call.keys_end >= 3; ++i) {
    const std::string_view last = argv[call.keys_end - 1];
    if (!call.prefetch && iequals(last, "prefetch")) {
      call.prefetch = true;
    } else if (!call.prefix && iequals(last, "prefix")) {
      call.prefix = true;
    } else {
      break;
    }
    --call.keys_end;
  }
  return call;
}

size_t tier_exists_keys_end(std::span<const std::string_view> argv) {
  return parse_exists(argv).keys_end;
}

void tier_exists_command(CommandContext& ctx) {
  const ExistsCall call = parse_exists(ctx.inv.argv);
  ExistOptions options;
  options.prefetch_to_memory = call.prefetch;
  std::span<const std::string_view> keys =
      std::span<const std::string_view>(ctx.inv.argv).subspan(1, call.keys_end - 1);
  if (!call.prefix) return ctx.reply.integer(count_existing(ctx, keys, options));
  size_t run = 0;
  for (bool present : ctx.store.exist(keys, ExistOptions{})) {
    if (!present) break;
    ++run;
  }
  // Only the run is read next: its keys alone are prefetched.
  if (run > 0 && call.prefetch) (void)count_existing(ctx, keys.first(run), options);
  ctx.reply.integer(static_cast<int64_t>(run));
}

void tier_prefetch_command(CommandContext& ctx) {
  std::vector<std::string_view> keys(ctx.inv.argv.begin() + 1, ctx.inv.argv.end());
  const PrefetchHintsReceived& counters = ctx.server.prefetch_hints_received();
  counters.received.add(keys.size());
  if (const cluster::Member* member = ctx.server.cluster()) {
    const CachedMap& cached = cached_map(*member);
    const size_t before = keys.size();
    std::erase_if(keys, [&](std::string_view k) {
      return !cached.map || cached.map->owner(cluster::key_slot(k)) != cached.self;
    });
    counters.ignored.add(before - keys.size());
  }
  ExistOptions options;
  options.prefetch_to_memory = true;
  options.companion_elsewhere = [](std::string_view) { return true; };
  ctx.reply.integer(count_existing(ctx, keys, options));
}

// A bound past any flash read; it keeps the deadline's arithmetic in range.
constexpr int64_t kMaxWithinMs = 86'400'000;

struct TierGetCall {
  bool memory_only = false;
  std::optional<int64_t> within_ms;
  bool bounded() const { return memory_only || within_ms.has_value(); }
};

// Options after the key, in any order; each at most once.
std::optional<TierGetCall> parse_tier_get(CommandContext& ctx) {
  TierGetCall call;
  bool from_seen = false;
  for (size_t i = 2; i < ctx.argc(); i += 2) {
    const std::string_view option = ctx.arg(i);
    const bool has_value = i + 1 < ctx.argc();
    if (iequals(option, "from") && has_value && !from_seen) {
      from_seen = true;
      if (iequals(ctx.arg(i + 1), "memory")) {
        call.memory_only = true;
      } else if (!iequals(ctx.arg(i + 1), "any")) {
        ctx.reply.error("ERR FROM takes memory or any");
        return std::nullopt;
      }
    } else if (iequals(option, "within") && has_value && !call.within_ms) {
      std::optional<int64_t> ms = parse_int64(ctx.arg(i + 1));
      if (!ms || *ms < 0 || *ms > kMaxWithinMs) {
        ctx.reply.error("ERR WITHIN takes a non-negative number of milliseconds, at most a day");
        return std::nullopt;
      }
      call.within_ms = *ms;
    } else {
      ctx.reply.error(errors::kSyntax);
      return std::nullopt;
    }
  }
  return call;
}

bool tier_get_fetches(const Invocation& inv) {
  for (size_t i = 2; i + 1 < inv.argv.size(); i += 2) {
    if (iequals(inv.argv[i], "from") && iequals(inv.argv[i + 1], "memory")) return false;
  }
  return true;
}

void tier_get_command(CommandContext& ctx) {
  std::optional<TierGetCall> call = parse_tier_get(ctx);
  if (!call) return;
  const std::string_view key = ctx.arg(1);
  if (!call->bounded()) {
    if (!can_stream(ctx))
      return reply_view_or_null(ctx,
                                ctx.store.read_resident(key, ResidentRead::whole(touches(ctx))));
    return reply_range(ctx, key, 0, UINT64_MAX, /*absent_is_null=*/true);
  }
  Result<ObjectView> v = ctx.store.read_resident(key, ResidentRead::whole(touches(ctx)));
  if (v || v.status().code() != StatusCode::kBusy) return reply_view_or_null(ctx, v);
  // Only flash holds it.
  if (call->memory_only) {
    ctx.server.tier_get_bounded_misses(false).add();
  } else if (ctx.defer != nullptr && ctx.defer->fetch_within(key, *call->within_ms)) {
    return;
  } else {
    ctx.server.tier_get_bounded_misses(true).add();
  }
  ctx.reply.null();
}

}  // namespace

void register_tier_commands(CommandTable& table) {
  table.add({"tier.stat", 2, kReadOnly, 1, 1, 1, tier_stat_command,
             "Size, version, TTL, tier state and per-chunk residency of an object"});
  table.add({"tier.exists", -2, kReadOnly | kFast, 1, -1, 1, tier_exists_command,
             "Count existing keys (PREFIX: the leading run); PREFETCH starts promoting them to "
             "memory",
             0, nullptr, nullptr, 0, tier_exists_keys_end});
  table.add({"tier.prefetch", -2, kReadOnly | kFast, 0, 0, 0, tier_prefetch_command,
             "Prefetch the keys this node holds among those named (hints between nodes)"});
  // kMayStream: in a transaction its value is fetched first, as GET's is,
  // unless it reads FROM memory.
  table.add({"tier.get", -2, kReadOnly | kFast | kMayStream, 1, 1, 1, tier_get_command,
             "Get a value, or a miss rather than wait for flash (FROM memory, WITHIN ms)", 0,
             tier_get_fetches});
}

}  // namespace tierkv::server
