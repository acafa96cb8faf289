// Preheat jobs over the wire:
//
//   TIER.PREHEAT key source [PIECE bytes] [CACHE yes|no] [DIGEST sha256:<hex>] [TTL s]
//       -> job id (integer), at once
//   TIER.PREHEAT PREFIX keyprefix file:///dir/ [options as above]
//       -> array of job ids, one per file under the directory (sorted by
//          relative path; key = keyprefix + relative path)
//   TIER.JOB id         -> map: id, key, source, state, bytes_done,
//                          bytes_total, pieces_done, pieces_total,
//                          piece_size, rate_bytes_per_sec, retries, cached,
//                          started_ms, finished_ms, error
//   TIER.JOB CANCEL id  -> +OK (also for a job that already ended)
//   TIER.JOBS           -> array of those maps, oldest first
//   TIER.JOBS cursor [COUNT n]
//       -> [next cursor, array of at most n maps (default 100)], as SCAN:
//          start at 0, go on with the cursor returned until it is 0
//
// The key form has an odd number of arguments and the PREFIX form an even
// one, so a key that happens to be named "prefix" is still a key.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "core/config.h"
#include "server/commands/command.h"
#include "store/preheat/preheat_types.h"

namespace tierkv::server {
namespace {

// How a job publishes: under the exec gate, between two commands, and as a
// write, not while CLIENT PAUSE WRITE (or ALL) holds writes. The pause is
// checked under the gate, where no CLIENT PAUSE can start; while it holds,
// the job's preheat worker leaves the gate and sleeps (UNPAUSE or a longer
// pause may move the end, so it looks again at least every 50 ms).
//
// In cluster mode the key is routed again there, as a write after ASKING:
// the job was routed when it was submitted, and its slot may have moved
// since (a key created on a node whose slot moved away would be served by
// no one). A refused publish fails the job with the refusal.
ExclusiveRunner publish_runner(CommandContext& ctx, std::string key) {
  // Shared, as the gate is: a job can end after the server.
  return [gate = ctx.server.exec_gate().runner(), pause = ctx.server.shared_client_pause(),
          server = &ctx.server, key = std::move(key)](absl::FunctionRef<void()> publish) {
    for (;;) {
      int64_t held_until = 0;
      std::string refusal;
      TIERKV_RETURN_IF_ERROR(gate([&] {
        held_until = pause->holds_until(/*writes=*/true);
        if (held_until != 0) return;
        std::optional<KeyFence::Pass> pass;
        refusal = key.empty() ? std::string() : cluster_write_refusal(*server, key, pass);
        if (refusal.empty()) publish();
      }));
      if (!refusal.empty())
        return Status::unavailable("the key's slot is not here now: " + refusal);
      if (held_until == 0) return Status::ok();
      const int64_t wait = std::clamp<int64_t>(held_until - ClientPause::now_ms(), 1, 50);
      std::this_thread::sleep_for(std::chrono::milliseconds(wait));
    }
  };
}

// Options after the positional arguments; false after replying an error.
bool parse_preheat_options(CommandContext& ctx, size_t first, PreheatRequest& r) {
  for (size_t i = first; i + 1 < ctx.argc(); i += 2) {
    const std::string_view name = ctx.arg(i);
    const std::string_view value = ctx.arg(i + 1);
    if (iequals(name, "piece")) {
      Result<int64_t> bytes = parse_byte_size(value);
      if (!bytes || *bytes <= 0) {
        ctx.reply.error("ERR PIECE must be a positive size");
        return false;
      }
      r.piece_size = static_cast<uint64_t>(*bytes);
    } else if (iequals(name, "cache")) {
      if (!iequals(value, "yes") && !iequals(value, "no")) {
        ctx.reply.error("ERR CACHE must be yes or no");
        return false;
      }
      r.cache = iequals(value, "yes");
    } else if (iequals(name, "digest")) {
      if (value.size() < 7 || !iequals(value.substr(0, 7), "sha256:")) {
        ctx.reply.error("ERR DIGEST must be sha256:<64 hex digits>");
        return false;
      }
      r.sha256 = std::string(value.substr(7));
      std::ranges::transform(r.sha256, r.sha256.begin(),
                             [](unsigned char c) { return std::tolower(c); });
    } else if (iequals(name, "ttl")) {
      std::optional<int64_t> s = parse_int64(value);
      if (!s || *s <= 0 || *s > int64_t{1} << 40) {
        ctx.reply.error(errors::invalid_expire("tier.preheat"));
        return false;
      }
      r.ttl_s = *s;
    } else {
      ctx.reply.error(errors::kSyntax);
      return false;
    }
  }
  return true;
}

void reply_status(ReplyBuffer& reply, const PreheatJobStatus& s) {
  reply.map(15);
  reply.bulk("id");
  reply.integer(static_cast<int64_t>(s.id));
  reply.bulk("key");
  reply.bulk(s.key);
  reply.bulk("source");
  reply.bulk(s.source);
  reply.bulk("state");
  reply.bulk(preheat_state_name(s.state));
  reply.bulk("bytes_done");
  reply.integer(static_cast<int64_t>(s.bytes_done));
  reply.bulk("bytes_total");
  reply.integer(static_cast<int64_t>(s.bytes_total));
  reply.bulk("pieces_done");
  reply.integer(s.pieces_done);
  reply.bulk("pieces_total");
  reply.integer(s.pieces_total);
  reply.bulk("piece_size");
  reply.integer(static_cast<int64_t>(s.piece_size));
  reply.bulk("rate_bytes_per_sec");
  reply.integer(static_cast<int64_t>(std::llround(s.rate_bytes_s)));
  reply.bulk("retries");
  reply.integer(static_cast<int64_t>(s.retries));
  reply.bulk("cached");
  reply.boolean(s.cached);
  reply.bulk("started_ms");
  reply.integer(s.started_ms);
  reply.bulk("finished_ms");
  reply.integer(s.finished_ms);
  reply.bulk("error");
  reply.bulk(s.error);
}

void reply_ids(ReplyBuffer& reply, const Result<std::vector<uint64_t>>& ids) {
  if (!ids) return reply.error(ids.status());
  reply.array(ids->size());
  for (uint64_t id : *ids) reply.integer(static_cast<int64_t>(id));
}

// The folder is walked on a preheat worker, not on this network thread
// (it may hold many thousands of files); inside EXEC, in place.
void preheat_prefix(CommandContext& ctx) {
  if (ctx.server.cluster() != nullptr) {
    return ctx.reply.error(
        "ERR TIER.PREHEAT PREFIX is not available in cluster mode: the files' keys fall in every "
        "slot; preheat them key by key");
  }
  PreheatRequest options;
  options.exclusive = publish_runner(ctx, {});  // refused in cluster mode
  if (!parse_preheat_options(ctx, 4, options)) return;
  std::string prefix(ctx.arg(2));
  std::string dir(ctx.arg(3));
  if (!dir.ends_with('/')) dir += '/';
  Store& store = ctx.store;
  auto walk = [&store, prefix, dir, options](auto done) {
    store.preheats().start_folder_async(
        prefix, dir, options, [done = std::move(done)](Result<std::vector<uint64_t>> ids) {
          done([ids = std::move(ids)](ReplyBuffer& reply) { reply_ids(reply, ids); });
        });
  };
  if (ctx.defer != nullptr && ctx.defer->reply_later(walk)) return;
  reply_ids(ctx.reply, store.preheats().start_folder(prefix, dir, options));
}

// The PREFIX form (an even argument count) names no key of its own.
size_t tier_preheat_keys_end(std::span<const std::string_view> argv) {
  return argv.size() % 2 == 0 ? 1 : argv.size();
}

void tier_preheat_command(CommandContext& ctx) {
  if (ctx.argc() % 2 == 0) {
    if (!iequals(ctx.arg(1), "prefix")) return ctx.reply.error(errors::kSyntax);
    return preheat_prefix(ctx);
  }
  PreheatRequest r;
  r.exclusive = publish_runner(ctx, std::string(ctx.arg(1)));
  r.key = std::string(ctx.arg(1));
  r.source = std::string(ctx.arg(2));
  if (!parse_preheat_options(ctx, 3, r)) return;
  Result<uint64_t> id = ctx.store.preheats().start(std::move(r));
  if (!id) return ctx.reply.error(id.status());
  ctx.reply.integer(static_cast<int64_t>(*id));
}

std::optional<uint64_t> parse_job_id(CommandContext& ctx, std::string_view text) {
  std::optional<int64_t> id = parse_int64(text);
  if (!id || *id <= 0) {
    ctx.reply.error("ERR invalid job id");
    return std::nullopt;
  }
  return static_cast<uint64_t>(*id);
}

void tier_job_command(CommandContext& ctx) {
  if (ctx.argc() == 3) {
    if (!iequals(ctx.arg(1), "cancel")) return ctx.reply.error(errors::kSyntax);
    std::optional<uint64_t> id = parse_job_id(ctx, ctx.arg(2));
    if (!id) return;
    Status st = ctx.store.preheats().cancel(*id);
    if (!st.is_ok()) return ctx.reply.error("ERR no such preheat job");
    return ctx.reply.simple("OK");
  }
  if (ctx.argc() != 2) return ctx.reply.error(errors::wrong_arity("tier.job"));
  std::optional<uint64_t> id = parse_job_id(ctx, ctx.arg(1));
  if (!id) return;
  std::optional<PreheatJobStatus> s = ctx.store.preheats().job(*id);
  if (!s) return ctx.reply.error("ERR no such preheat job");
  reply_status(ctx.reply, *s);
}

constexpr int64_t kDefaultJobsCount = 100;

void tier_jobs_command(CommandContext& ctx) {
  if (ctx.argc() == 1) {
    std::vector<PreheatJobStatus> all = ctx.store.preheats().jobs();
    ctx.reply.array(all.size());
    for (const PreheatJobStatus& s : all) reply_status(ctx.reply, s);
    return;
  }
  // The cursor is the id to go on from (ids only grow).
  std::optional<int64_t> cursor = parse_int64(ctx.arg(1));
  if (!cursor || *cursor < 0) return ctx.reply.error("ERR invalid cursor");
  int64_t count = kDefaultJobsCount;
  if (ctx.argc() == 4 && iequals(ctx.arg(2), "count")) {
    std::optional<int64_t> n = parse_int64(ctx.arg(3));
    if (!n || *n < 1) return ctx.reply.error(errors::kSyntax);
    count = *n;
  } else if (ctx.argc() != 2) {
    return ctx.reply.error(errors::kSyntax);
  }
  uint64_t next = 0;
  std::vector<PreheatJobStatus> page =
      ctx.store.preheats().jobs(static_cast<uint64_t>(*cursor), static_cast<size_t>(count), &next);
  ctx.reply.array(2);
  ctx.reply.bulk(std::to_string(next));
  ctx.reply.array(page.size());
  for (const PreheatJobStatus& s : page) reply_status(ctx.reply, s);
}

}  // namespace

void register_preheat_commands(CommandTable& table) {
  table.add({"tier.preheat", -3, kWrite, 1, 1, 1, tier_preheat_command,
             "Start a job that loads a file or URL into flash and memory; returns its id", 0,
             nullptr, nullptr, 0, tier_preheat_keys_end});
  table.add({"tier.job", -2, kAdmin, 0, 0, 0, tier_job_command,
             "State and progress of a preheat job; CANCEL id stops it"});
  table.add({"tier.jobs", -1, kAdmin, 0, 0, 0, tier_jobs_command,
             "Every preheat job, oldest first; with a cursor [COUNT n], a page of them as SCAN"});
}

}  // namespace tierkv::server
