// Streaming commands: ranged reads and declared look-ahead.
//
//   TIER.READ key offset length [USEONCE]  -> bytes [offset, offset + length)
//     of the value (clipped to it; "" past its end), or null if the key is
//     absent. Only the chunks of the range are read, from memory or through
//     the pulled flash reader. USEONCE: the read never counts toward
//     promotion, and a use-once object in memory is dropped once served.
//   TIER.STREAM key [key ...] [DEPTH d] [CHANNELS p] [USEONCE] -> number of keys
//     The connection will read these keys in this order (GET, GETRANGE with
//     non-negative indexes, or TIER.READ): the server keeps up to d of them
//     read ahead, at most p reads at once (defaults: stream-depth,
//     stream-channels). Options are taken from the end. A read of another
//     key, or TIER.STREAM RESET, ends the look-ahead; a new TIER.STREAM
//     replaces the old one.
//   TIER.STREAM RESET -> OK
//
// Without a declared stream, a connection's ranged reads (TIER.READ,
// GETRANGE) go through its Readahead: sequential ranges of one flash object
// are read ahead (readahead.h; readahead, readahead-max-chunks).
#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "server/commands/command.h"
#include "server/commands/string_common.h"
#include "store/stream/readahead.h"
#include "store/stream/stream_reader.h"

namespace tierkv::server {
namespace {

constexpr int64_t kMaxDepth = 1024;
constexpr int64_t kMaxChannels = 256;

// A non-negative integer argument, or nullopt after an error reply.
std::optional<uint64_t> parse_offset_arg(CommandContext& ctx, std::string_view arg,
                                         std::string_view what) {
  std::optional<int64_t> v = parse_int64(arg);
  if (!v) {
    ctx.reply.error(errors::kNotInteger);
    return std::nullopt;
  }
  if (*v < 0) {
    ctx.reply.error(fmt::format("ERR {} is negative", what));
    return std::nullopt;
  }
  return static_cast<uint64_t>(*v);
}

void tier_read_command(CommandContext& ctx) {
  if (ctx.argc() > 5) return ctx.reply.error(errors::kSyntax);
  bool use_once = false;
  if (ctx.argc() == 5) {
    if (!iequals(ctx.arg(4), "useonce")) return ctx.reply.error(errors::kSyntax);
    use_once = true;
  }
  std::optional<uint64_t> offset = parse_offset_arg(ctx, ctx.arg(2), "offset");
  if (!offset) return;
  std::optional<uint64_t> length = parse_offset_arg(ctx, ctx.arg(3), "length");
  if (!length) return;
  // Without flash (or a connection to stream into) memory answers at once.
  if (!can_stream(ctx))
    return reply_view_or_null(
        ctx, ctx.store.read_resident(ctx.arg(1), ResidentRead::range(*offset, *length)));
  reply_range(ctx, ctx.arg(1), *offset, *length, /*absent_is_null=*/true, use_once);
}

// TIER.STREAM's arguments: options are taken from the end; `end` is the
// index past the last key. `error` is set if an option's value is bad.
struct StreamArgs {
  size_t end = 0;
  StreamOptions options;
  std::string error;
};

StreamArgs parse_stream_args(std::span<const std::string_view> argv) {
  StreamArgs a;
  a.end = argv.size();
  for (;;) {
    if (a.end > 2 && iequals(argv[a.end - 1], "useonce")) {
      a.options.use_once = true;
      --a.end;
      continue;
    }
    if (a.end <= 3) return a;
    std::string_view name = argv[a.end - 2];
    const bool depth = iequals(name, "depth");
    if (!depth && !iequals(name, "channels")) return a;
    std::optional<int64_t> v = parse_int64(argv[a.end - 1]);
    if (!v) {
      a.error = errors::kNotInteger;
    } else if (depth && (*v < 0 || *v > kMaxDepth)) {
      a.error = fmt::format("ERR DEPTH must be between 0 and {}", kMaxDepth);
    } else if (!depth && (*v < 1 || *v > kMaxChannels)) {
      a.error = fmt::format("ERR CHANNELS must be between 1 and {}", kMaxChannels);
    }
    if (!a.error.empty()) return a;
    if (depth)
      a.options.depth = static_cast<int32_t>(*v);
    else
      a.options.channels = static_cast<uint32_t>(*v);
    a.end -= 2;
  }
}

size_t tier_stream_keys_end(std::span<const std::string_view> argv) {
  if (argv.size() == 2 && iequals(argv[1], "reset")) return 1;
  return parse_stream_args(argv).end;
}

void tier_stream_command(CommandContext& ctx) {
  if (ctx.argc() == 2 && iequals(ctx.arg(1), "reset")) {
    if (ctx.client.stream) ctx.client.stream->reset();
    ctx.client.stream.reset();
    return ctx.reply.ok();
  }
  StreamArgs args = parse_stream_args(ctx.inv.argv);
  if (!args.error.empty()) return ctx.reply.error(args.error);
  const size_t end = args.end;
  StreamOptions& options = args.options;
  if (end < 2) return ctx.reply.error(errors::wrong_arity("tier.stream"));
  std::vector<std::string> keys;
  keys.reserve(end - 1);
  for (size_t i = 1; i < end; ++i) keys.emplace_back(ctx.arg(i));
  if (ctx.client.stream) ctx.client.stream->reset();
  ctx.client.stream = ctx.store.open_stream(std::move(keys), options);
  ctx.reply.integer(static_cast<int64_t>(end - 1));
}

}  // namespace

ReadStart client_read(CommandContext& ctx, std::string_view key, uint64_t offset, uint64_t length,
                      FlashReadCallbacks callbacks, bool use_once) {
  // A connection's declared stream serves its next key from the look-ahead.
  if (ctx.client.stream)
    return ctx.client.stream->read(key, offset, length, std::move(callbacks), use_once);
  ReadOptions options{.window = ReadWindow{}, .use_once = use_once, .count_access = touches(ctx)};
  if (offset == 0 && length == UINT64_MAX)
    return ctx.store.read(key, offset, length, std::move(callbacks), options);
  if (!ctx.client.readahead) ctx.client.readahead = ctx.store.open_readahead();
  return ctx.client.readahead->read(key, offset, length, std::move(callbacks), options);
}

void register_stream_commands(CommandTable& table) {
  table.add({"tier.read", -4, kReadOnly | kMayStream, 1, 1, 1, tier_read_command,
             "Read a byte range of a value, from memory or flash; USEONCE: do not keep it"});
  table.add({"tier.stream", -2, kReadOnly, 1, -1, 1, tier_stream_command,
             "Declare the keys this connection reads next, in order, to be read ahead", 0, nullptr,
             nullptr, 0, tier_stream_keys_end});
}

}  // namespace tierkv::server
