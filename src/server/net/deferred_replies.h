// DeferredReplies: the replies of one connection that wait for something
// other than the network. A network thread never waits for flash, so a
// command whose answer needs it suspends the connection: it streams a
// flash read as a bulk reply (GET, and EXEC's queued reads in their turn),
// fetches flash-only values into memory and runs the command again
// (commands flagged kReadsValue, with backoff), holds a write's reply
// until the write is durable (fsync=always), lets a store worker finish
// the command (a large SET's commit, a flash-to-flash copy, a later
// reply), or holds the command while CLIENT PAUSE does.
//
// One owner thread: every method runs on the connection's I/O thread.
// The Store's callbacks run on flash threads (or on this one) and only
// post back to it; a read's pieces go through an ordered inbox, the one
// piece of state other threads touch. Each wait has a number, and a
// callback of an older wait is ignored.
//
// While it waits the connection reads and dispatches nothing, so
// pipelined replies stay in order. When the wait ends with the reply
// queued, the host counts the command and goes on (Host::finished).
#pragma once

#include <asio.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "core/mutex.h"
#include "server/commands/command.h"

namespace tierkv::server {

class Server;

class DeferredReplies : public ReplyDeferral {
 public:
  // The connection that owns it: where replies go, and what it does when
  // a wait ends.
  class Host {
   public:
    virtual ~Host() = default;
    // Replies ready to send (the connection's output buffer).
    virtual ReplyBuffer& replies() = 0;
    // Reply bytes not yet taken by the socket.
    virtual size_t unsent_bytes() const = 0;
    virtual void send() = 0;
    virtual void close() = 0;
    virtual bool closed() const = 0;
    // Keeps the host (and so this object) alive while a callback is owed.
    virtual std::shared_ptr<void> keep_alive() = 0;
    // The waiting command's reply is queued: count it and go on.
    virtual void finished(const CommandSpec& spec, uint64_t clock, bool failed) = 0;
    // Its values were fetched (or the fetch's bound passed): run it again.
    virtual void run_again(const CommandSpec& spec, uint64_t clock) = 0;
    // A CLIENT PAUSE that held the command may have ended.
    virtual void recheck_pause() = 0;
  };

  // Fetches of one kReadsValue command before it answers -BUSY (or -OOM if
  // a fetch found no room): the first at once, each later one (the value
  // left memory again before the command ran) after 4, 8, ... 256 ms, about
  // one second in all.
  static constexpr int kMaxFetchAttempts = 10;
  // A queued read streams once fewer reply bytes than this wait.
  static constexpr size_t kStreamTurnBytes = 1 << 20;

  // `state` and `inv` are the host's, read for the command that waits.
  DeferredReplies(Host& host, Server& server, asio::io_context& io, ClientState& state,
                  Invocation& inv);
  DeferredReplies(const DeferredReplies&) = delete;
  DeferredReplies& operator=(const DeferredReplies&) = delete;

  // --- the host's side ---
  bool waiting() const { return !waiting_for<NoWait>(); }
  // The command will be dispatched or run again (a fetch or a pause).
  bool runs_again() const { return waiting_for<FetchWait>() || waiting_for<PauseWait>(); }
  bool fetching() const { return waiting_for<FetchWait>(); }
  bool paused() const { return waiting_for<PauseWait>(); }
  // A GET streaming from pinned flash regions.
  bool streaming() const { return waiting_for<StreamWait>(); }
  // A new command (not a rerun) is dispatched: its fetches start afresh.
  void begin_command();
  // Before a kReadsValue command first runs: true if it waits for its
  // flash-only values (it runs again after, through Host::run_again).
  bool fetch_before_run(const CommandSpec& spec, uint64_t clock);
  // Where the handler replies: a held buffer if `durable_write` (the
  // reply waits until the write is durable), else the host's replies.
  ReplyBuffer& begin_run(bool durable_write);
  struct RunEnd {
    bool retrying = false;  // fetch_again(): the command runs later
    bool waiting = false;   // the reply comes later; finished() counts it
    bool failed = false;
  };
  // `reply` is begin_run()'s, which had `errors_before` errors before the
  // handler ran.
  RunEnd end_run(const CommandSpec& spec, uint64_t clock, const ReplyBuffer& reply,
                 uint64_t errors_before);
  // CLIENT PAUSE holds the command until `until_ms` (or a recheck).
  void wait_for_unpause(int64_t until_ms);
  void end_pause();
  // The socket took bytes: a queued read may have its turn.
  void on_sent();
  // Called by the host once the wait ended and its reply is queued.
  void end_wait();
  // The client is gone: cancel reads and timers, drop pinned buffers.
  void cancel();

  // --- ReplyDeferral (the handlers' side) ---
  FlashReadCallbacks bulk_stream_callbacks() override;
  void stream_bulk(uint64_t length, std::shared_ptr<FlashRead> read) override;
  void persist(std::string_view key, uint64_t version) override;
  Store::DurableCallback hold_until_durable() override;
  void fetch_again() override { fetch_again_ = true; }
  bool fetch_within(std::string_view key, int64_t bound_ms) override;
  ReplyBuffer* queue_stream(uint64_t length, std::shared_ptr<HeldRead> held) override;
  void commit_flash_value(const FlashValueSink::Commit& commit) override;
  bool copy_on_flash(FlashCopyRequest request, CopyReply reply) override;
  bool reply_later(ReplyLaterStart start) override;
  void after_reply(std::function<void()> work) override;

 private:
  struct NoWait {};
  // A GET streamed from a pulled flash read (stream_bulk).
  struct StreamWait {
    uint64_t length = 0;
    uint64_t sent = 0;
    bool header_sent = false;
    size_t queued_before = 0;  // reply bytes queued ahead of the value
  };
  // Flash-only values being fetched into memory, or the backoff before a
  // retry; the command runs again after.
  struct FetchWait {};
  // A write's reply held until the write is durable (fsync=always).
  struct PersistWait {};
  // CLIENT PAUSE holds the command; it is dispatched again when it ends.
  struct PauseWait {};
  // A store worker finishes the command: a large SET's commit, a
  // flash-to-flash copy (which answers through `copy_reply`), a later reply.
  struct CommitWait {
    CopyReply copy_reply;
  };
  // EXEC's next queued read waits until the socket took the replies ahead
  // of it, as a pipeline waits to be read: one client's batch holds about
  // one read window of buffers, not the batch.
  struct StreamTurnWait {};
  using Wait = std::variant<NoWait, StreamWait, FetchWait, PersistWait, PauseWait, CommitWait,
                            StreamTurnWait>;
  template <typename W>
  bool waiting_for() const {
    return std::holds_alternative<W>(wait_);
  }
  // Callbacks of this wait (a newer one ignores them).
  uint64_t next_wait() { return ++wait_gen_; }
  bool current(uint64_t gen) const { return !host_.closed() && gen == wait_gen_; }
  // The reply is queued: count the command and go on.
  void finish(bool failed);
  ReplyBuffer& out();

  // Wraps a Store callback: `on_result(*this, args...)` runs on the owner
  // thread. Keeps the host (and the server's count of pending callbacks)
  // alive until it ran.
  template <typename Fn>
  auto posting(Fn on_result);

  // Streams the first queued read once less than kStreamTurnBytes of
  // replies wait for the socket (StreamTurnWait until then); the replies
  // queued behind it follow when it ends.
  void next_queued_stream();
  void start_queued_stream();
  // A flash read's callbacks, queued in the order they were called (from
  // any thread, this one included) and drained in that order here: Asio
  // may run a handler posted from this thread after one posted later from
  // another, and a read can hand out a memory chunk from here and the next
  // chunk from a flash thread.
  void stream_inbox_push(uint64_t gen, std::optional<ValuePiece> piece, Status done);
  void drain_stream_inbox();
  void on_stream_piece(uint64_t gen, ValuePiece piece);
  void on_stream_done(uint64_t gen, const Status& status);

  // After fetch_again(): reruns the command later, or answers the error.
  // True if it will run again.
  bool retry_fetch(const CommandSpec& spec, uint64_t clock);
  // Starts fetching the flash-only values `spec` reads; false if none.
  bool start_fetch(const CommandSpec& spec);
  std::vector<std::string_view> flash_only_keys(const CommandSpec& spec);
  void fetch_keys(std::span<const std::string_view> keys, uint64_t gen);
  void on_retry_due(uint64_t gen);
  void on_fetch_done(uint64_t gen, const Status& status);
  void on_persist_done(uint64_t gen, const Status& status);
  void on_flash_value_committed(uint64_t gen, const Status& status, bool written);
  void on_flash_copied(uint64_t gen, const Result<FlashCopyOutcome>& result);
  void on_later_reply(uint64_t gen, const LaterReply& reply);

  Host& host_;
  Server& server_;
  asio::io_context& io_;
  ClientState& state_;
  Invocation& inv_;

  Wait wait_;
  uint64_t wait_gen_ = 0;
  const CommandSpec* deferred_spec_ = nullptr;
  uint64_t deferred_clock_ = 0;   // when the deferred command started
  bool deferred_failed_ = false;  // its handler replied an error

  int fetch_attempts_ = 0;
  uint64_t fetch_deadline_ns_ = 0;  // fetch_within()'s bound, once asked
  bool fetch_again_ = false;
  // The running RENAME/COPY found memory holding its source after all: it
  // copies there, fetching first as any kReadsValue command does.
  bool flash_copy_declined_ = false;
  Status fetch_error_;  // of the last fetch
  asio::steady_timer retry_timer_;
  asio::steady_timer pause_timer_;  // PauseWait: the end of the pause

  // A streamed GET's read, until its on_done.
  std::shared_ptr<void> stream_keep_alive_;  // the host, until the read's on_done
  std::shared_ptr<FlashRead> stream_read_;   // cancelled if the client goes
  // EXEC's flash reads, each with the replies that follow it (queue_stream),
  // streamed in order once EXEC has run; and the replies after the read
  // being streamed now.
  struct QueuedStream {
    uint64_t length;
    std::shared_ptr<HeldRead> held;
    ReplyBuffer after;
  };
  std::deque<QueuedStream> queued_streams_;
  ReplyBuffer stream_after_;
  struct StreamEvent {
    uint64_t gen;
    std::optional<ValuePiece> piece;  // empty: the read's on_done
    Status done;
  };
  Mutex stream_inbox_mu_;
  std::vector<StreamEvent> stream_inbox_ ABSL_GUARDED_BY(stream_inbox_mu_);
  bool stream_drain_posted_ ABSL_GUARDED_BY(stream_inbox_mu_) = false;

  // A held write: its reply waits here until the write is durable.
  ReplyBuffer held_;
  bool holding_ = false;
  int persists_pending_ = 0;
  Status persist_error_;
};

}  // namespace tierkv::server
