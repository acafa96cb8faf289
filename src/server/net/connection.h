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
// answer needs flash (or a CLIENT PAUSE) suspends the connection; its
// DeferredReplies (deferred_replies.h) owns the wait. While suspended the
// connection neither reads nor dispatches, so pipelined replies stay in
// order.
#pragma once

#include <asio.hpp>
#include <asio/generic/stream_protocol.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/commands/command.h"
#include "server/net/client_info.h"
#include "server/net/deferred_replies.h"
#include "server/net/transport.h"
#include "server/protocol/resp_parser.h"

namespace tierkv::server {

class Server;
struct IoThread;

class Connection : public std::enable_shared_from_this<Connection>, private DeferredReplies::Host {
 public:
  using Socket = Transport;
  static constexpr size_t kPauseReadBytes = 1 << 20;

  // `local`: a loopback or Unix socket peer.
  Connection(Server& server, IoThread& thread, Socket socket, std::string addr, std::string laddr,
             bool local);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs on the connection's thread.
  void start();
  void close() override;
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
  void recheck_pause() override;
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

  // The fetch of a command that waited without a fence pass is done.
  // Cluster mode: it is routed again before it runs (its slot may have
  // begun to move, and the migrator taken its key); true if it was
  // refused, and answered.
  bool refused_after_wait(const CommandSpec& spec);
  // A large value goes to flash as it arrives (flash_value_sink.h).
  void stream_value_to_flash(std::string_view key, uint64_t length);
  // The flash value's buffers are all waiting for flash: read again when
  // one is free.
  void wait_for_flash_room();
  // The wait ended (its reply queued): go on with pipelined commands.
  void resume();
  void flush();
  void start_write();
  void on_write(const asio::error_code& ec, size_t n);
  // DeferredReplies::Host:
  ReplyBuffer& replies() override { return out_; }
  size_t unsent_bytes() const override { return out_.pending_bytes() + writing_.pending_bytes(); }
  void send() override { flush(); }
  bool closed() const override { return closed_; }
  std::shared_ptr<void> keep_alive() override { return shared_from_this(); }
  void finished(const CommandSpec& spec, uint64_t clock, bool failed) override;
  void run_again(const CommandSpec& spec, uint64_t clock) override;
  // CLIENT PAUSE: true if `spec` must wait; then the connection waits
  // (reading nothing) until the pause ends or changes, and dispatches the
  // command again.
  bool held_by_pause(const CommandSpec& spec);
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
  DeferredReplies deferred_;

  // What other threads read (CLIENT LIST, CLIENT KILL, maxmemory-clients):
  // published from state_ when a command that changes it runs.
  ClientInfo info_;
  // Publishes what the client holds to info_ (on this thread).
  void publish_memory();
  int fd_ = -1;
};

}  // namespace tierkv::server
