// Helpers shared by the string command files (commands_string.cc,
// commands_counter.cc).
//
// Values are read with Store::read_resident(), which never waits for flash:
// commands flagged kReadsValue have their flash-only values fetched into
// memory before they run. If a value left memory again before the handler
// ran, read_resident() answers Busy and the handler, through
// awaiting_flash(), replies nothing: the connection fetches again (with
// backoff) and reruns the command, or answers -BUSY / -OOM after a few tries.
#pragma once

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>

#include "server/commands/command.h"

namespace tierkv::server {

// True if replies can stream from flash: there is flash and a connection.
bool can_stream(const CommandContext& ctx);

// Replies with bytes [offset, offset + length) of the key's value: from
// memory at once, or pulled from flash through the read window (only the
// chunks of the range are read), or from the connection's stream
// (TIER.STREAM) when the key is its next one. An absent key is null, or ""
// (GETRANGE). Needs can_stream(ctx).
void reply_range(CommandContext& ctx, std::string_view key, uint64_t offset, uint64_t length,
                 bool absent_is_null, bool use_once = false);

// The read behind reply_range(): through the connection's stream
// (TIER.STREAM) if it declared one, else a ranged read through its
// readahead (sequential ranges of one object are read ahead), else (a whole
// value: GET) a plain Store::read (commands_stream.cc).
ReadStart client_read(CommandContext& ctx, std::string_view key, uint64_t offset, uint64_t length,
                      FlashReadCallbacks callbacks, bool use_once);

// Replies to a failed store call: a missing key is null, anything else an error.
// False for a client in CLIENT NO-TOUCH mode: its reads are no accesses.
inline bool touches(const CommandContext& ctx) {
  return !ctx.client.no_touch;
}

inline void reply_view_or_null(CommandContext& ctx, const Result<ObjectView>& v) {
  if (v)
    ctx.reply.bulk(*v);
  else if (v.status().code() == StatusCode::kNotFound)
    ctx.reply.null();
  else
    ctx.reply.error(v.status());
}

// True if `v` says the value is only on flash and the connection will fetch
// it and rerun the command: the handler must then return without a reply.
inline bool awaiting_flash(CommandContext& ctx, const Result<ObjectView>& v) {
  if (v || v.status().code() != StatusCode::kBusy || ctx.defer == nullptr) return false;
  ctx.defer->fetch_again();
  return true;
}

// The same for a key about to be read by a write (SET ... GET, GETSET):
// true if only flash holds it.
inline bool awaiting_flash(CommandContext& ctx, std::string_view key) {
  if (ctx.defer == nullptr || !ctx.store.needs_flash(key)) return false;
  ctx.defer->fetch_again();
  return true;
}

// Copies a small value out of a view into `buf` (for number parsing).
// False if it does not fit: no valid number is that long.
template <size_t N>
bool copy_small(const ObjectView& v, char (&buf)[N], std::string_view& out) {
  if (v.length() >= N) return false;
  size_t n = 0;
  v.for_each_segment([&](std::string_view s) {
    std::memcpy(buf + n, s.data(), s.size());
    n += s.size();
  });
  buf[n] = '\0';
  out = std::string_view(buf, n);
  return true;
}

// The error for a value that would pass tierkv's object size limit (SETBIT,
// BITFIELD; SETRANGE and APPEND when it is below proto-max-bulk-len).
inline constexpr std::string_view kStringTooLong =
    "ERR string exceeds maximum allowed size (max-object-size)";

// With fsync=always, the reply to a write waits until it is on flash.
inline void hold_until_durable(CommandContext& ctx, std::string_view key, const WriteResult& r) {
  if (ctx.defer != nullptr && r.written && ctx.store.durable_writes())
    ctx.defer->persist(key, r.version);
}

// Read-modify-write of one key's value, atomic as in Redis. Reads the
// value (`old`, NotFound if absent; a flash-only value or an error is
// answered here), then `write(old, if_unchanged)` computes the new value
// and writes it with `if_unchanged` (kIfVersion on the version read,
// KEEPTTL). It returns the write's result, or nullopt once it replied
// itself (a bad value, nothing to write). A write that lost to another
// writer runs again on the new value; one that landed is held for
// fsync=always, then `reply()` answers.
template <typename Write, typename Reply>
void read_modify_write(CommandContext& ctx, std::string_view key, Write write, Reply reply) {
  for (;;) {
    Result<ObjectView> old = ctx.store.read_resident(key);
    if (awaiting_flash(ctx, old)) return;
    if (!old && old.status().code() != StatusCode::kNotFound) return ctx.reply.error(old.status());
    const WriteOptions if_unchanged{.condition = WriteCondition::kIfVersion,
                                    .expected_version = old ? old->version() : 0,
                                    .keep_ttl = true};
    std::optional<Result<WriteResult>> r = write(old, if_unchanged);
    if (!r) return;
    if (!*r) return ctx.reply.error(r->status());
    hold_until_durable(ctx, key, **r);
    if ((*r)->written) return reply();
  }
}

// For read_modify_write's `write`: answers the error, writes nothing.
inline std::nullopt_t refuse(CommandContext& ctx, std::string_view error) {
  ctx.reply.error(error);
  return std::nullopt;
}

inline bool exceeds_object_limit(CommandContext& ctx, uint64_t size) {
  return size > static_cast<uint64_t>(ctx.server.limits().max_object_size.load());
}

// Redis's checkStringLength for SETRANGE and APPEND: a result longer than
// proto-max-bulk-len is refused with Redis's text, naming that limit. Then
// tierkv's own max-object-size (never larger, see config_validate) is
// checked and named. True if the command was refused.
inline bool refuse_string_length(CommandContext& ctx, uint64_t size) {
  uint64_t bulk_limit =
      static_cast<uint64_t>(ctx.server.limits().proto_max_bulk_len.load(std::memory_order_relaxed));
  if (size > bulk_limit) {
    ctx.reply.error("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    return true;
  }
  if (!exceeds_object_limit(ctx, size)) return false;
  ctx.reply.error(kStringTooLong);
  return true;
}

// Appends bytes [from, to) of `view` (offsets relative to the view) to `w`.
inline void append_view_range(ObjectWriter& w, const ObjectView& view, uint64_t from, uint64_t to) {
  uint64_t pos = 0;
  view.for_each_segment([&](std::string_view s) {
    uint64_t seg_end = pos + s.size();
    if (seg_end > from && pos < to) {
      uint64_t a = std::max(pos, from) - pos;
      uint64_t b = std::min(seg_end, to) - pos;
      w.append(s.substr(a, b - a));
    }
    pos = seg_end;
  });
}

inline void append_zeros(ObjectWriter& w, uint64_t n) {
  while (n > 0) {
    auto [dst, room] = w.next_writable();
    if (room == 0) return;
    size_t k = static_cast<size_t>(std::min<uint64_t>(room, n));
    std::memset(dst, 0, k);
    w.advance(k);
    n -= k;
  }
}

}  // namespace tierkv::server
