// Transactions: MULTI EXEC DISCARD WATCH UNWATCH, with Redis 7.0's replies.
//
// The connection queues what a client sends between MULTI and EXEC (see
// Connection::dispatch): a command that cannot be queued (unknown, wrong
// arity, NOAUTH, LOADING) is answered with its error and makes EXEC answer
// -EXECABORT. EXEC is flagged kExclusive, so it runs holding every I/O
// thread's gate slot (exec_gate.h): no other client's command runs while
// the queue does. It is also flagged kReadsValue with kRunsQueue: before it
// runs, the connection fetches the flash-only values that the queued
// commands read, and EXEC pins them for its duration, so nothing in it
// waits for flash while the other threads wait for it.
//
// WATCH keeps versions (txn_state.h). EXEC compares them under the gate,
// so no write can slip in between the check and the queue.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "server/commands/acl_gate.h"
#include "server/commands/command.h"
#include "server/commands/transaction.h"

namespace tierkv::server {

bool queue_command(TxnState& txn, const CommandSpec& spec,
                   const std::vector<std::string_view>& argv, int64_t limit) {
  // A std::string per argument, and the QueuedCommand itself.
  int64_t bytes = static_cast<int64_t>(sizeof(QueuedCommand));
  for (std::string_view a : argv) bytes += static_cast<int64_t>(sizeof(std::string) + a.size());
  if (txn.queued_bytes + bytes > limit) return false;
  QueuedCommand q;
  q.spec = &spec;
  q.args.reserve(argv.size());
  for (std::string_view a : argv) q.args.emplace_back(a);
  txn.queue.push_back(std::move(q));
  txn.queued_bytes += bytes;
  return true;
}

bool queue_if_in_multi(TxnState& txn, const CommandSpec& spec,
                       const std::vector<std::string_view>& argv, int64_t limit,
                       ReplyBuffer& reply) {
  if (!txn.in_multi || (spec.flags & kTxnControl)) return false;
  if (txn.dirty) {
    // EXEC will refuse the queue: keep nothing more of it.
    reply.simple("QUEUED");
    return true;
  }
  if (!queue_command(txn, spec, argv, limit)) {
    txn.dirty = true;
    txn.queue = {};
    txn.queued_bytes = 0;
    reply.error(
        fmt::format("ERR the transaction's queue would pass client-query-buffer-limit ({} bytes): "
                    "it is discarded, and EXEC will fail",
                    limit));
    return true;
  }
  reply.simple("QUEUED");
  return true;
}

namespace {

// A value a command streams (GET) is read after EXEC, in its reply's turn
// (ReplyDeferral::queue_stream): only one that must be found in memory
// (TIER.GET ... WITHIN, as its reads_value_if says) is fetched first.
bool reads_values(const QueuedCommand& q) {
  const bool streams = (q.spec->flags & kMayStream) != 0;
  if (!streams && !(q.spec->flags & kReadsValue)) return false;
  if (q.spec->reads_value_if == nullptr) return !streams;
  Invocation inv;
  inv.argv.assign(q.args.begin(), q.args.end());
  return q.spec->reads_value_if(inv);
}

}  // namespace

std::vector<std::string_view> txn_value_keys(const TxnState& txn) {
  std::vector<std::string_view> keys;
  if (!txn.in_multi || txn.dirty) return keys;  // EXEC will not run the queue
  for (const QueuedCommand& q : txn.queue) {
    if (!reads_values(q)) continue;
    for_each_value_key_index(*q.spec, q.args.size(), [&](size_t i) { keys.push_back(q.args[i]); });
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

namespace {

// What a queued command sees as its connection. EXEC cannot suspend
// between its commands, so a command that finds its value gone from
// memory (only possible if a value EXEC did not pin, e.g. one written
// earlier in the same EXEC, was evicted at once) replies nothing here and
// gets an error in its slot. Durability holds are the connection's: with
// fsync=always the whole EXEC reply waits until every write in it is
// durable.
class TxnDeferral final : public ReplyDeferral {
 public:
  explicit TxnDeferral(ReplyDeferral* outer) : outer_(outer) {}

  // The callbacks may run on a flash thread after EXEC returned: they hold
  // nothing and drop the pieces, which lets the cancelled read finish.
  FlashReadCallbacks bulk_stream_callbacks() override {
    return FlashReadCallbacks{[](ValuePiece) {}, [](Status) {}};
  }
  void stream_bulk(uint64_t, std::shared_ptr<FlashRead> read) override {
    if (read) read->cancel();
  }
  void persist(std::string_view key, uint64_t version) override {
    if (outer_ != nullptr) outer_->persist(key, version);
  }
  Store::DurableCallback hold_until_durable() override {
    return outer_ != nullptr ? outer_->hold_until_durable() : Store::DurableCallback{};
  }
  // The command replied nothing: run_queued() puts an error in its slot.
  void fetch_again() override {}
  // EXEC fetched the values TIER.GET reads before it ran.
  bool fetch_within(std::string_view, int64_t) override { return false; }
  bool queues_streams() const override { return outer_ != nullptr; }
  ReplyBuffer* queue_stream(uint64_t length, std::shared_ptr<HeldRead> held) override {
    next_reply_ = outer_ != nullptr ? outer_->queue_stream(length, std::move(held)) : nullptr;
    return next_reply_;
  }
  // Where the replies after this command go, if it queued a stream.
  ReplyBuffer* next_reply() const { return next_reply_; }
  // Queued values are buffered whole (never streamed to flash).
  void commit_flash_value(const FlashValueSink::Commit&) override {}
  // EXEC fetched the sources into memory before it ran.
  bool copy_on_flash(FlashCopyRequest, CopyReply) override { return false; }
  bool reply_later(ReplyLaterStart) override { return false; }
  void after_reply(std::function<void()> work) override {
    if (outer_ != nullptr)
      outer_->after_reply(std::move(work));
    else
      work();
  }

 private:
  ReplyDeferral* outer_;
  ReplyBuffer* next_reply_ = nullptr;
};

// Pins the values the queue reads, so that eviction cannot take them while
// EXEC runs. False if one is only on flash now (it was evicted after the
// fetch): the connection fetches again and reruns EXEC.
bool pin_values(CommandContext& ctx, std::vector<ObjectView>& pins) {
  // Without flash a value that memory drops is gone, not elsewhere: a miss.
  if (!ctx.store.has_flash()) return true;
  for (std::string_view key : txn_value_keys(ctx.client.txn)) {
    Result<ObjectView> v = ctx.store.read_resident(key, ResidentRead::look());
    if (v) {
      pins.push_back(std::move(v).value());
    } else if (ctx.defer != nullptr && ctx.store.needs_flash(key)) {
      ctx.defer->fetch_again();
      return false;
    }
  }
  return true;
}

WatchedKey snapshot(Store& store, std::string_view key) {
  AbsentWatch absent = store.watch_absent(key);
  std::optional<ObjectInfo> info = store.stat(key);
  if (!info) return WatchedKey{std::string(key), 0, 0, std::move(absent)};
  return WatchedKey{std::string(key), info->version, info->expire_at_ms, {}};
}

// True if no watched key changed since WATCH: any write makes a new version;
// a delete, FLUSHALL or expiry makes it absent (version 0); a key absent
// then must still be absent and never have been created meanwhile.
bool watches_hold(Store& store, const std::vector<WatchedKey>& watched) {
  for (const WatchedKey& w : watched) {
    std::optional<ObjectInfo> now = store.stat(w.key);
    uint64_t version = now ? now->version : 0;
    int64_t expire_at_ms = now ? now->expire_at_ms : 0;
    if (version != w.version || expire_at_ms != w.expire_at_ms || w.absent.created_since())
      return false;
  }
  return true;
}

// Runs one queued command, replying to `out`; a command that queued a
// stream moves `out` to the buffer sent after that stream.
void run_queued(CommandContext& ctx, const QueuedCommand& q, ReplyBuffer*& out) {
  Invocation inv;
  inv.argv.assign(q.args.begin(), q.args.end());
  // The user's rules may have changed since the command was queued (as
  // Redis, EXEC checks again, and refuses it in its slot).
  if (std::string denied = acl_refusal(ctx.server, *q.spec, inv.argv, ctx.client, true, "multi");
      !denied.empty()) {
    const bool command = denied.find("to run the") != std::string::npos;
    return out->error(fmt::format(
        "NOPERM ACLs rules changed between the moment the transaction was accumulated and the "
        "EXEC call. This command is no longer allowed for the following reason: {}",
        command ? "no permission to execute the command or subcommand"
                : "no permission to touch the specified keys"));
  }
  TxnDeferral defer(ctx.defer);
  CommandContext sub{inv, *out, ctx.client, ctx.server, ctx.store, &defer};
  size_t before = out->pending_bytes();
  uint64_t errors_before = out->error_count();
  auto start = std::chrono::steady_clock::now();
  q.spec->handler(sub);
  const bool failed = out->error_count() != errors_before;
  // Every slot of EXEC's array needs a reply.
  if (defer.next_reply() != nullptr)
    out = defer.next_reply();
  else if (out->pending_bytes() == before)
    out->error(Status::busy("the value left memory during the transaction; try again"));
  auto ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
  if (ctx.server.account_queued) ctx.server.account_queued(*q.spec, ns, failed);
  if (ctx.server.slowlog().wants(ns))
    log_slow_command(ctx.server, *q.spec, inv.argv, ns, ctx.client);
}

void exec_command(CommandContext& ctx) {
  TxnState& txn = ctx.client.txn;
  if (!txn.in_multi) return ctx.reply.error("ERR EXEC without MULTI");
  if (txn.dirty) {
    txn.clear();
    return ctx.reply.error(kExecAbort);
  }
  std::vector<ObjectView> pins;
  if (!pin_values(ctx, pins)) return;
  std::vector<QueuedCommand> queue = std::move(txn.queue);
  bool unchanged = watches_hold(ctx.store, txn.watched);
  txn.clear();  // before the queue runs: its commands see a client not in MULTI
  if (!unchanged) return ctx.reply.null_array();
  ctx.reply.array(queue.size());
  ReplyBuffer* out = &ctx.reply;
  for (const QueuedCommand& q : queue) run_queued(ctx, q, out);
}

void multi_command(CommandContext& ctx) {
  TxnState& txn = ctx.client.txn;
  if (txn.in_multi) return ctx.reply.error("ERR MULTI calls can not be nested");
  txn.in_multi = true;
  txn.dirty = false;
  txn.queue.clear();
  ctx.reply.ok();
}

void discard_command(CommandContext& ctx) {
  if (!ctx.client.txn.in_multi) return ctx.reply.error("ERR DISCARD without MULTI");
  ctx.client.txn.clear();
  ctx.reply.ok();
}

void watch_command(CommandContext& ctx) {
  TxnState& txn = ctx.client.txn;
  if (txn.in_multi) return ctx.reply.error("ERR WATCH inside MULTI is not allowed");
  for (size_t i = 1; i < ctx.argc(); ++i) {
    std::string_view key = ctx.arg(i);
    // As Redis: a key watched twice keeps its first snapshot, so a change
    // between the two WATCHes still aborts.
    bool seen = std::any_of(txn.watched.begin(), txn.watched.end(),
                            [&](const WatchedKey& w) { return w.key == key; });
    if (!seen) txn.watched.push_back(snapshot(ctx.store, key));
  }
  ctx.reply.ok();
}

void unwatch_command(CommandContext& ctx) {
  ctx.client.txn.watched.clear();
  ctx.reply.ok();
}

}  // namespace

void register_txn_commands(CommandTable& table) {
  constexpr uint32_t kControl = kTxnControl | kFast | kLoadingOk;
  table.add({"multi", 1, kControl, 0, 0, 0, multi_command, "Start a transaction"});
  table.add({"exec", 1, kTxnControl | kLoadingOk | kExclusive | kRunsQueue | kReadsValue | kWrite,
             0, 0, 0, exec_command, "Run the queued commands of a transaction"});
  table.add({"discard", 1, kControl, 0, 0, 0, discard_command, "Drop a transaction's queue"});
  // Not while loading: a flash key not yet scanned would be watched as
  // absent, and a later DEL of it would not abort EXEC.
  table.add({"watch", -2, kTxnControl | kFast, 1, -1, 1, watch_command,
             "Make EXEC fail if any of these keys changes"});
  table.add({"unwatch", 1, kFast | kLoadingOk, 0, 0, 0, unwatch_command, "Forget watched keys"});
}

}  // namespace tierkv::server
