// Connection: one client socket, served entirely on one I/O thread.
//
// Reads go into the RespParser's buffer (or, for a large SET value, straight
// into the store's chunk buffers, or into buffers bound for flash when the
// value is larger than memory); each complete command is dispatched at
// once, so pipelined commands are answered in order from one read. Replies
// accumulate in one ReplyBuffer while the other is being written with
// scatter-gather I/O; large values go out from their pinned chunks.
//
// Backpressure: while more than kPauseReadBytes of replies wait for the
// client, the connection stops reading, so a client that pipelines without
// reading cannot grow the server's memory. A client whose queued replies
// pass client-output-buffer-limit is disconnected.
//
// Deferred replies: a network thread never waits for flash. A command whose
// answer needs flash suspends the connection: it streams a flash read as a
// bulk reply (GET), waits for flash-only values to be fetched into memory
// and then runs (commands flagged kReadsValue), or holds its reply until
// the write is durable (fsync=always). While suspended the connection
// neither reads nor dispatches, so pipelined replies stay in order. The
// Store's callbacks run on flash threads and only post back to this
// connection's I/O thread.
#pragma once

#include <asio.hpp>
#include <asio/generic/stream_protocol.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/mutex.h"
#include "server/commands/command.h"
#include "server/net/client_info.h"
#include "server/net/transport.h"
#include "server/protocol/resp_parser.h"

namespace tierkv::server {

class Server;
struct IoThread;

class Connection : public std::enable_shared_from_this<Connection>, private ReplyDeferral {
 public:
  using Socket = Transport;
  static constexpr size_t kPauseReadBytes = 1 << 20;

  // `local`: a loopback or Unix socket peer.
  Connection(Server& server, IoThread& thread, Socket socket, std::string addr, std::string laddr,
             bool local);
  ~Connection();
  Connection(const Connection&) = delete;
  // Fetches of one kReadsValue command before it answers -BUSY (or -OOM if
  // a fetch found no room): the first at once, each later one (the value
  // left memory again before the command ran) after 4, 8, ... 256 ms, about
  // one second in all. Nothing on the network thread waits for flash.
  static constexpr int kMaxFetchAttempts = 10;
  Connection& operator=(const Connection&) = delete;

  // Runs on the connection's thread.
  void start();
  void close();
  // Closes the client if it has been idle longer than `timeout_ms`.
  void check_idle(int64_t now_ms, int64_t timeout_ms);

  uint64_t id() const { return state_.id; }
  // Fixed at accept: safe from any thread.
  const std::string& addr() const { return state_.addr; }
  // The ACL user it runs as (CLIENT KILL USER); any thread.
  std::string user_name() const { return info_.user(); }
  const std::string& laddr() const { return state_.laddr; }
  // CLIENT KILL from any thread: closes the connection on its own thread.
  // False if it was killed already (it is closing).
  bool kill();
  // On this connection's thread: a command held by CLIENT PAUSE runs if the
  // pause no longer holds it.
  void recheck_pause();
  // One CLIENT LIST line; safe from any thread.
  std::string describe(int64_t now_ms) const;
  // What the client holds now (query buffer, output and MULTI queue), as
  // of its last batch or write; safe from any thread (maxmemory-clients).
  uint64_t memory_bytes() const { return info_.memory_bytes(); }
  // CLIENT NO-EVICT on: maxmemory-clients never closes it. Any thread.
  bool no_evict() const { return info_.no_evict(); }

 private:
  void start_read();
  void on_read(const asio::error_code& ec, size_t n, bool direct);
  void process_input();
  bool query_buffer_over_limit();
  void on_large_value();
  const CommandSpec* lookup(std::string_view name);
  void dispatch(const std::vector<std::string_view>& argv, uint64_t& clock);
  void run_command(const CommandSpec& spec, uint64_t& clock);
  void end_command();
  // Counts a finished command; returns the end time.
  uint64_t account(const CommandSpec& spec, uint64_t start, bool failed);

  // --- deferred replies ---
  // What the connection waits on. While it waits it reads and dispatches
  // nothing, so pipelined replies stay in order; a callback posted back to
  // its thread (checked against wait_gen_) ends the wait.
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
    ReplyDeferral::CopyReply copy_reply;
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
  bool waiting() const { return !waiting_for<NoWait>(); }
  // ReplyDeferral:
  FlashReadCallbacks bulk_stream_callbacks() override;
  void stream_bulk(uint64_t length, std::shared_ptr<FlashRead> read) override;
  void persist(std::string_view key, uint64_t version) override;
  Store::DurableCallback hold_until_durable() override;
  void fetch_again() override { fetch_again_ = true; }
  bool fetch_within(std::string_view key, int64_t bound_ms) override;
  ReplyBuffer* queue_stream(uint64_t length, std::shared_ptr<HeldRead> held) override;
  // Streams the first queued read (StreamWait) once less than
  // kPauseReadBytes of replies wait for the socket (StreamTurnWait until
  // then); the replies queued behind it follow when it ends.
  void next_queued_stream();
  void start_queued_stream();
  void commit_flash_value(const FlashValueSink::Commit& commit) override;
  void on_flash_value_committed(uint64_t gen, const Status& status, bool written);
  bool copy_on_flash(FlashCopyRequest request, CopyReply reply) override;
  bool reply_later(ReplyLaterStart start) override;
  void on_later_reply(uint64_t gen, const LaterReply& reply);
  void after_reply(std::function<void()> work) override;
  // Runs a store worker's step under the exec gate (the end of a large SET
  // or a flash-to-flash copy).
  // Cluster mode: a command that waited for a fetch without a fence pass
  // is routed again before it runs (its slot may have begun to move, and
  // the migrator taken its key); true if it was refused, and answered.
  bool refused_after_wait();
  ExclusiveRunner exclusive_runner();
  void on_flash_copied(uint64_t gen, const Result<FlashCopyOutcome>& result);
  // A large value goes to flash as it arrives (flash_value_sink.h).
  void stream_value_to_flash(std::string_view key, uint64_t length);
  // The flash value's buffers are all waiting for flash: read again when
  // one is free.
  void wait_for_flash_room();
  // After fetch_again(): reruns the command later, or answers the error.
  // True if it will run again.
  bool retry_fetch(const CommandSpec& spec, uint64_t clock);
  // Starts fetching the flash-only values `spec` reads; false if none.
  bool start_fetch(const CommandSpec& spec);
  std::vector<std::string_view> flash_only_keys(const CommandSpec& spec);
  void fetch_keys(std::span<const std::string_view> keys, uint64_t gen);
  void on_retry_due(uint64_t gen);
  // Runs `fn` on this connection's thread; keeps the connection (and the
  // server's count of pending callbacks) alive until it ran.
  template <typename Fn>
  void post_back(const std::shared_ptr<void>& token, Fn fn);
  std::shared_ptr<void> inflight_token();
  void on_stream_piece(uint64_t gen, ValuePiece piece);
  void on_stream_done(uint64_t gen, const Status& status);
  // A flash read's callbacks, queued in the order they were called (from
  // any thread, this one included) and drained in that order here: Asio
  // may run a handler posted from this thread after one posted later from
  // another, and a read can hand out a memory chunk from here and the next
  // chunk from a flash thread.
  void stream_inbox_push(uint64_t gen, std::optional<ValuePiece> piece, Status done);
  void drain_stream_inbox();
  void on_fetch_done(uint64_t gen, const Status& status);
  void on_persist_done(uint64_t gen, const Status& status);
  // The wait ended (its reply queued): go on with pipelined commands.
  void resume();
  void flush();
  void start_write();
  void on_write(const asio::error_code& ec, size_t n);
  // CLIENT PAUSE: true if `spec` must wait; then the connection waits
  // (reading nothing) until the pause ends or changes, and dispatches the
  // command again.
  bool held_by_pause(const CommandSpec& spec);
  void wait_for_unpause(int64_t until_ms);
  void publish_identity();
  void publish_multi();  // CLIENT LIST's multi= and flags=x
  RespParser::Limits parser_limits() const;

  Server& server_;
  IoThread& thread_;
  Transport socket_;
  asio::steady_timer handshake_timer_;  // a TLS handshake has this long
  RespParser parser_;
  ReplyBuffer out_;      // replies being produced
  ReplyBuffer writing_;  // replies being written
  std::vector<std::string_view> gather_;
  std::vector<asio::const_buffer> iov_;
  Invocation inv_;
  ClientState state_;
  std::optional<ObjectWriter> value_writer_;
  // Cluster mode: the running command's hold on keys of a slot moving away
  // (key_fence.h); kept until the command is done, even past a close while
  // its write is still landing.
  std::optional<KeyFence::Pass> fence_pass_;
  std::unique_ptr<FlashValueSink> flash_value_;
  bool flash_room_wait_ = false;
  Status value_error_;
  bool value_refused_loading_ = false;  // a streamed value arrived while loading
  // The commands this connection used last, most recent first: a pipeline
  // repeats one, a transaction cycles through MULTI, its commands and EXEC.
  std::array<const CommandSpec*, 4> recent_specs_{};
  bool reading_ = false;
  bool writing_in_flight_ = false;
  bool closed_ = false;

  // Set while process_input() runs a batch of pipelined commands. The first
  // exclusive command of the batch takes every gate slot and keeps them
  // until the batch ends (or the connection waits), so a pipeline of
  // transactions hands the gate to the other I/O threads once per batch,
  // not once per EXEC; later commands of the batch run under it.
  bool in_batch_ = false;
  std::optional<ExecGate::Guard> batch_gate_;
  Wait wait_;
  uint64_t wait_gen_ = 0;  // callbacks of an older wait are ignored
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
  asio::steady_timer pause_timer_;  // kPause: the end of the pause
  // A streamed GET's read, until its on_done.
  std::shared_ptr<Connection> stream_keep_alive_;  // until the read's on_done
  std::shared_ptr<FlashRead> stream_read_;         // cancelled if the client goes
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
  // kPersist: the reply of a write waits here until the write is durable.
  ReplyBuffer held_;
  bool holding_ = false;
  int persists_pending_ = 0;
  Status persist_error_;

  // What other threads read (CLIENT LIST, CLIENT KILL, maxmemory-clients):
  // published from state_ when a command that changes it runs.
  ClientInfo info_;
  // Publishes what the client holds to info_ (on this thread).
  void publish_memory();
  int fd_ = -1;
};

}  // namespace tierkv::server
