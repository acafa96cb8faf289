#include "server/net/connection.h"

#include <absl/cleanup/cleanup.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <time.h>

#include <algorithm>
#include <chrono>

#include "core/clock.h"
#include "server/commands/acl_gate.h"
#include "server/commands/transaction.h"
#include "server/net/server.h"

namespace tierkv::server {
namespace {

constexpr std::chrono::seconds kHandshakeTimeout(10);

// At most this many buffers per writev (IOV_MAX is 1024).
constexpr size_t kMaxIov = 128;

// Wall-clock ms from the coarse clock: idle tracking needs no precision, and
// it is read once per socket read.
int64_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

Connection::Connection(Server& server, IoThread& thread, Socket socket, std::string addr,
                       std::string laddr, bool local)
    : server_(server),
      thread_(thread),
      socket_(std::move(socket)),
      handshake_timer_(thread.io),
      deferred_(*this, server, thread.io, state_, inv_) {
  state_.id = server_.context().next_client_id();
  state_.addr = std::move(addr);
  state_.laddr = std::move(laddr);
  state_.local = local;
  state_.created_ms = now_ms();
  state_.last_active_ms = state_.created_ms;
  // As Redis: a client that connects while no password is set is the
  // authenticated default user, and stays so if requirepass is set later.
  state_.authenticated = !server_.context().limits().auth_required.load(std::memory_order_relaxed);
  state_.user = server_.context().acl_users().default_user();
  state_.acl_generation = server_.context().acl_users().generation();
  ClientInfo::Identity who;
  who.user = state_.user->name();
  info_.publish(std::move(who));
  info_.set_last_active(state_.created_ms);
  fd_ = socket_.native_handle();
  gather_.reserve(kMaxIov);
  iov_.reserve(kMaxIov);
}

Connection::~Connection() = default;

void Connection::start() {
  if (server_.stopping()) {
    closed_ = true;
    socket_.close();
    return;
  }
  const int64_t max_clients = server_.context().limits().maxclients.load(std::memory_order_relaxed);
  if (!server_.clients().add(this, max_clients)) {
    // Like Redis: tell the client why, best effort, then close.
    socket_.write_now("-ERR max number of clients reached\r\n");
    server_.rejected_connections().add();
    closed_ = true;
    socket_.close();
    return;
  }
  thread_.connections.insert(this);
  if (!socket_.tls()) return start_read();
  // A peer that never finishes its handshake (a plaintext client on the
  // TLS port waiting for a reply) is closed, not kept.
  handshake_timer_.expires_after(kHandshakeTimeout);
  handshake_timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (!ec) self->close();
  });
  socket_.async_handshake([self = shared_from_this()](const asio::error_code& ec) {
    self->handshake_timer_.cancel();
    if (self->closed_) return;
    if (ec) {
      self->server_.tls_handshake_failures().add();
      spdlog::debug("client {} ({}): TLS handshake failed: {}", self->state_.id, self->state_.addr,
                    ec.message());
      return self->close();
    }
    self->start_read();
  });
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  socket_.close();
  handshake_timer_.cancel();
  thread_.connections.erase(this);
  server_.clients().remove(this);
  value_writer_.reset();
  flash_value_.reset();
  deferred_.cancel();
  out_.clear();
  writing_.clear();
}

void Connection::check_idle(int64_t now, int64_t timeout_ms) {
  if (now - state_.last_active_ms > timeout_ms) close();
}

RespParser::Limits Connection::parser_limits() const {
  const ServerContext::Limits& l = server_.context().limits();
  RespParser::Limits p;
  p.max_bulk_len = l.proto_max_bulk_len.load(std::memory_order_relaxed);
  p.max_multibulk_args = l.max_multibulk_args.load(std::memory_order_relaxed);
  p.max_inline_len = l.max_inline_len.load(std::memory_order_relaxed);
  p.unauthenticated = l.auth_required.load(std::memory_order_relaxed) && !state_.authenticated;
  return p;
}

void Connection::start_read() {
  if (reading_ || closed_ || state_.close_after_reply || deferred_.waiting()) return;
  if (out_.pending_bytes() + writing_.pending_bytes() > kPauseReadBytes) return;
  if (flash_value_ && flash_value_->paused()) return wait_for_flash_room();
  bool direct = parser_.wants_direct();
  std::span<char> span = direct ? parser_.direct_span() : parser_.prepare();
  reading_ = true;
  socket_.async_read_some(
      asio::buffer(span.data(), span.size()),
      [self = shared_from_this(), direct](const asio::error_code& ec, size_t n) {
        self->on_read(ec, n, direct);
      });
}

void Connection::on_read(const asio::error_code& ec, size_t n, bool direct) {
  reading_ = false;
  if (closed_) return;
  if (ec) {
    close();
    return;
  }
  if (direct) {
    parser_.direct_commit(n);
  } else {
    parser_.commit(n);
  }
  state_.last_active_ms = now_ms();
  info_.set_last_active(state_.last_active_ms);
  process_input();
  if (query_buffer_over_limit()) return close();
  flush();
  start_read();
}

// Like Redis's client-query-buffer-limit: what one client has sent of a
// command not yet complete. A value streamed into the store counts by the
// bytes received so far (its reservation is released when the client goes).
bool Connection::query_buffer_over_limit() {
  // A value bound for flash counts by what it holds back.
  uint64_t bytes = value_writer_  ? value_writer_->filled()
                   : flash_value_ ? flash_value_->buffered_bytes()
                                  : parser_.query_bytes();
  int64_t limit =
      server_.context().limits().client_query_buffer_limit.load(std::memory_order_relaxed);
  if (closed_ || static_cast<int64_t>(bytes) <= limit) return false;
  spdlog::warn("Closing client that reached max query buffer length: id={} addr={} qbuf={}",
               state_.id, state_.addr, bytes);
  return true;
}

void Connection::process_input() {
  // Every way out of the batch gives the gate back: a wait for flash or a
  // pause, too, never holds it.
  in_batch_ = true;
  absl::Cleanup end_batch = [this] {
    in_batch_ = false;
    batch_gate_.reset();
  };
  parser_.set_limits(parser_limits());
  // One clock read per command: each command's latency runs from the end of
  // the previous one (or the read) to its own end, parsing included.
  uint64_t clock = mono_ns();
  while (!closed_ && !state_.close_after_reply && !deferred_.waiting()) {
    // Value bytes already read go into the sink only once it has a buffer
    // for them under flash-write-buffer (and its window has room).
    if (flash_value_ && flash_value_->paused()) return wait_for_flash_room();
    switch (parser_.next()) {
      case RespParser::Event::kNeedMore:
        publish_memory();  // a command still arriving counts too
        return;
      case RespParser::Event::kLargeValue:
        on_large_value();
        break;
      case RespParser::Event::kError:
        out_.error(parser_.error());
        state_.close_after_reply = true;
        return;
      case RespParser::Event::kCommand: {
        size_t before = out_.pending_bytes() + writing_.pending_bytes();
        dispatch(parser_.argv(), clock);
        size_t after = out_.pending_bytes() + writing_.pending_bytes();
        // One reply may be as large as the object it returns; what is cut
        // off is a client that lets replies pile up.
        int64_t limit =
            server_.context().limits().client_output_buffer_limit.load(std::memory_order_relaxed);
        if (before > 0 && static_cast<int64_t>(after) > limit) {
          spdlog::info("client id={} addr={} closed: output buffer {} bytes over limit {}",
                       state_.id, state_.addr, after, limit);
          close();
          return;
        }
        // The auth state may have changed the parser's limits.
        parser_.set_limits(parser_limits());
        publish_memory();
        break;
      }
    }
  }
}

void Connection::publish_memory() {
  const uint64_t output = out_.pending_bytes() + writing_.pending_bytes();
  const uint64_t query = value_writer_  ? value_writer_->filled()
                         : flash_value_ ? flash_value_->buffered_bytes()
                                        : parser_.query_bytes();
  info_.set_memory(output, output + query + static_cast<uint64_t>(state_.txn.queued_bytes));
}

void Connection::on_large_value() {
  const std::vector<std::string_view>& argv = parser_.argv();
  const CommandSpec* spec = lookup(argv[0]);
  bool authorized = (state_.authenticated ||
                     !server_.context().limits().auth_required.load(std::memory_order_relaxed)) &&
                    spec != nullptr &&
                    acl_refusal(server_.context(), *spec, argv, state_, /*log=*/false).empty();
  // Inside MULTI the value is queued with the command, so it is buffered.
  if (spec == nullptr || !(spec->flags & kStreamsValue) || !authorized || state_.txn.in_multi ||
      static_cast<size_t>(spec->value_arg) != parser_.large_index() || spec->first_key <= 0 ||
      static_cast<size_t>(spec->first_key) >= argv.size()) {
    parser_.buffer();
    return;
  }
  Store& store = server_.context().store();
  if (store.loading()) {
    // No writer while the store loads: the command will answer -LOADING
    // (also if loading ends before the value has arrived).
    value_refused_loading_ = true;
    parser_.discard();
    return;
  }
  const std::string_view key = argv[static_cast<size_t>(spec->first_key)];
  const uint64_t length = parser_.large_length();
  if (store.writes_past_memory(length)) return stream_value_to_flash(key, length);
  // A network thread never waits for room while flash can take the value:
  // waiting would stall its other clients, among them the writers whose
  // values would make the room.
  Result<ObjectWriter> writer = store.begin_put(key, length, /*wait_for_room=*/!store.has_flash());
  // Memory has no room now: flash takes the value instead.
  if (!writer && writer.status().code() == StatusCode::kOutOfMemory && store.has_flash())
    return stream_value_to_flash(key, length);
  if (!writer) {
    value_error_ = writer.status();
    parser_.discard();
    return;
  }
  value_writer_.emplace(std::move(*writer));
  parser_.stream_into(&*value_writer_);
}

const CommandSpec* Connection::lookup(std::string_view name) {
  // Check the recent commands before hashing; a hit moves to the front.
  for (size_t i = 0; i < recent_specs_.size() && recent_specs_[i] != nullptr; ++i) {
    const CommandSpec* spec = recent_specs_[i];
    if (iequals(name, spec->name)) {
      std::rotate(recent_specs_.begin(), recent_specs_.begin() + static_cast<ptrdiff_t>(i),
                  recent_specs_.begin() + static_cast<ptrdiff_t>(i) + 1);
      return spec;
    }
  }
  const CommandSpec* spec = server_.context().commands().find(name);
  if (spec != nullptr) {
    std::rotate(recent_specs_.begin(), recent_specs_.end() - 1, recent_specs_.end());
    recent_specs_[0] = spec;
  }
  return spec;
}

void Connection::dispatch(const std::vector<std::string_view>& argv, uint64_t& clock) {
  inv_.argv.assign(argv.begin(), argv.end());
  inv_.value_writer = nullptr;
  inv_.flash_value = nullptr;
  inv_.value_arg = 0;
  out_.set_proto(state_.proto);
  const CommandSpec* spec = lookup(argv[0]);
  // Inside MULTI, a command refused here makes EXEC answer -EXECABORT.
  if (spec == nullptr) {
    refuse_command(state_.txn, nullptr, errors::unknown_command(inv_), out_);
    end_command();
    return;
  }
  int argc = static_cast<int>(argv.size());
  const CommandStats& stats = server_.stats_for(*spec);
  if ((spec->arity > 0 && argc != spec->arity) || argc < -spec->arity) {
    stats.rejected->add();
    refuse_command(state_.txn, spec, errors::wrong_arity(spec->name), out_);
  } else if (!state_.authenticated && !(spec->flags & kNoAuth) &&
             server_.context().limits().auth_required.load(std::memory_order_relaxed)) {
    stats.rejected->add();
    refuse_command(state_.txn, spec, errors::kNoAuth, out_);
  } else if (std::string denied = acl_refusal(server_.context(), *spec, inv_.argv, state_);
             !denied.empty()) {
    stats.rejected->add();
    refuse_command(state_.txn, spec, denied, out_);
  } else if (!runs_while_loading(*spec, inv_) &&
             (value_refused_loading_ || server_.context().store().loading())) {
    stats.rejected->add();
    refuse_command(state_.txn, spec, errors::kLoading, out_);
  } else if (std::string refusal =
                 cluster_refusal(server_.context(), *spec, inv_.argv, state_, fence_pass_);
             !refusal.empty()) {
    stats.rejected->add();
    refuse_routed(state_.txn, spec, refusal, out_);
  } else if (held_by_pause(*spec)) {
    // Runs when the pause ends: dispatched again then.
  } else if (!value_error_.is_ok()) {
    stats.failed->add();
    refuse_in_multi(state_.txn);
    out_.error(value_error_);
  } else if (!queue_if_in_multi(state_.txn, *spec, inv_.argv,
                                server_.context().limits().client_query_buffer_limit.load(
                                    std::memory_order_relaxed),
                                out_)) {
    if (value_writer_) inv_.value_writer = &*value_writer_;
    inv_.flash_value = flash_value_.get();
    if (value_writer_ || flash_value_) inv_.value_arg = static_cast<size_t>(spec->value_arg);
    deferred_.begin_command();
    run_command(*spec, clock);
  }
  // A command waiting for a fetch or a pause runs later, with its streamed
  // value.
  if (!deferred_.runs_again()) end_command();
  // A GET streaming from flash reads pinned regions: the value it sends
  // stays whole even if the key moves away now, so it lets the migrator
  // go on (a client that stops reading would otherwise stall the move).
  // Any other wait holds the pass until resume() drops it.
  if (!deferred_.waiting() || deferred_.streaming()) fence_pass_.reset();
  publish_multi();
}

// As Redis 7.0: a pause of ALL holds every command (CLIENT UNPAUSE too), a
// pause of WRITE holds the commands that write, queued in MULTI or not, and
// an EXEC whose queue writes.
bool Connection::held_by_pause(const CommandSpec& spec) {
  const ClientPause& pause = server_.context().client_pause();
  if (!pause.active()) return false;
  bool writes = (spec.flags & kWrite) != 0;
  if ((spec.flags & kRunsQueue) && !writes) {
    for (const QueuedCommand& q : state_.txn.queue) writes = writes || (q.spec->flags & kWrite);
  }
  int64_t until = pause.holds_until(writes);
  if (until == 0) return false;
  deferred_.wait_for_unpause(until);
  return true;
}

void Connection::recheck_pause() {
  if (closed_ || !deferred_.paused()) return;
  deferred_.end_pause();
  // The wait is not the command's latency: its clock starts now.
  uint64_t clock = mono_ns();
  dispatch(parser_.argv(), clock);
  if (!deferred_.waiting()) resume();
}

bool Connection::kill() {
  if (!info_.mark_killed()) return false;
  std::shared_ptr<Connection> self = weak_from_this().lock();
  if (self) asio::post(thread_.io, [self] { self->close(); });
  return true;
}

void Connection::publish_multi() {
  info_.set_multi(state_.txn.in_multi ? static_cast<int>(state_.txn.queue.size()) : -1);
}

void Connection::end_command() {
  value_writer_.reset();
  flash_value_.reset();  // drops a pending when_room() callback too
  flash_room_wait_ = false;
  value_error_ = Status::ok();
  value_refused_loading_ = false;
}

void Connection::run_command(const CommandSpec& spec, uint64_t& clock) {
  if ((spec.flags & kReadsValue) && deferred_.fetch_before_run(spec, clock)) return;
  state_.last_command.assign(spec.name);
  info_.set_last_command(&spec);
  Store& store = server_.context().store();
  // With fsync=always, a write's reply is held until it is durable.
  ReplyBuffer& reply = deferred_.begin_run((spec.flags & kWrite) && store.durable_writes());
  const uint64_t errors_before = reply.error_count();
  CommandContext ctx{inv_, reply, state_, server_.context(), store, &deferred_};
  {
    std::optional<ExecGate::Guard> held;
    if (!batch_gate_) {
      ExecGate& gate = server_.context().exec_gate();
      bool exclusive = (spec.flags & kExclusive) != 0;
      if (exclusive && in_batch_) {
        batch_gate_.emplace(gate.exclusive());
      } else {
        held.emplace(exclusive ? gate.exclusive() : gate.shared(thread_.index));
      }
    }
    spec.handler(ctx);
  }
  const DeferredReplies::RunEnd end = deferred_.end_run(spec, clock, reply, errors_before);
  if (end.retrying) return;
  // EXEC may have run HELLO or CLIENT SETNAME.
  if (server_.is_identity_command(&spec) || (spec.flags & kRunsQueue)) publish_identity();
  // A deferred reply is counted when it is complete (finished()).
  if (!end.waiting) clock = account(spec, clock, end.failed);
}

void Connection::finished(const CommandSpec& spec, uint64_t clock, bool failed) {
  account(spec, clock, failed);
  resume();
}

void Connection::run_again(const CommandSpec& spec, uint64_t clock) {
  if (refused_after_wait(spec)) return;
  run_command(spec, clock);
  if (deferred_.fetching()) return;  // it needs another fetch
  end_command();
  publish_multi();  // an EXEC that waited for its fetch ended its MULTI
  if (!deferred_.waiting()) resume();
}

bool Connection::refused_after_wait(const CommandSpec& spec) {
  // With a pass the key could not move: the migrator waited for it.
  if (fence_pass_) return false;
  std::string refusal = cluster_reroute(server_.context(), spec, inv_.argv, state_, fence_pass_);
  if (refusal.empty()) return false;
  server_.stats_for(spec).rejected->add();
  out_.set_proto(state_.proto);
  refuse_routed(state_.txn, &spec, refusal, out_);
  end_command();
  publish_multi();
  resume();
  return true;
}

void Connection::resume() {
  deferred_.end_wait();
  fence_pass_.reset();  // the command that waited is done
  if (closed_) return;
  process_input();
  flush();
  start_read();
}

void Connection::stream_value_to_flash(std::string_view key, uint64_t length) {
  Result<std::unique_ptr<FlashValueSink>> sink =
      server_.context().store().begin_flash_value(key, length);
  if (!sink) {
    value_error_ = sink.status();
    parser_.discard();
    return;
  }
  flash_value_ = std::move(*sink);
  parser_.stream_into(flash_value_.get());
}

void Connection::wait_for_flash_room() {
  if (flash_room_wait_) return;
  flash_room_wait_ = true;
  std::shared_ptr<Connection> self = shared_from_this();
  flash_value_->when_room([self, token = server_.deferred_token()] {
    asio::post(self->thread_.io, [self, token] {
      self->flash_room_wait_ = false;
      if (self->closed_) return;
      // Bytes read before the pause may be waiting in the parser.
      self->process_input();
      if (self->query_buffer_over_limit()) return self->close();
      self->flush();
      self->start_read();
    });
  });
}

uint64_t Connection::account(const CommandSpec& spec, uint64_t start, bool failed) {
  const CommandStats& stats = server_.stats_for(spec);
  uint64_t end = mono_ns();
  stats.latency->record(end - start);
  ServerContext& server = server_.context();
  if (server.slowlog().wants(end - start))
    log_slow_command(server, spec, inv_.argv, end - start, state_);
  stats.calls->add();
  server_.commands_processed().add();
  if (failed) stats.failed->add();
  return end;
}

void Connection::publish_identity() {
  info_.publish({.name = state_.name,
                 .lib_name = state_.lib_name,
                 .lib_ver = state_.lib_ver,
                 .user = state_.user->name(),
                 .proto = static_cast<int>(state_.proto),
                 .no_evict = state_.no_evict,
                 .no_touch = state_.no_touch});
}

void Connection::flush() {
  if (writing_in_flight_ || closed_) return;
  if (writing_.empty()) {
    if (out_.empty()) {
      if (state_.close_after_reply) close();
      return;
    }
    out_.swap(writing_);
  }
  start_write();
}

void Connection::start_write() {
  gather_.clear();
  writing_.gather(gather_, kMaxIov);
  iov_.clear();
  for (std::string_view s : gather_) iov_.emplace_back(s.data(), s.size());
  writing_in_flight_ = true;
  socket_.async_write_some(iov_, [self = shared_from_this()](const asio::error_code& ec, size_t n) {
    self->on_write(ec, n);
  });
}

void Connection::on_write(const asio::error_code& ec, size_t n) {
  writing_in_flight_ = false;
  if (closed_) return;
  if (ec) {
    close();
    return;
  }
  writing_.consume(n);
  // As in Redis, a client that takes bytes is active: a slow reader of a
  // large value is not closed by `timeout` while it reads.
  if (n > 0) {
    state_.last_active_ms = now_ms();
    info_.set_last_active(state_.last_active_ms);
  }
  publish_memory();
  flush();
  deferred_.on_sent();
  start_read();
}

std::string Connection::describe(int64_t now) const {
  const ClientInfo::Identity who = info_.identity();
  const int multi = info_.multi();
  // Redis's letters, in its order: x (MULTI), e (NO-EVICT), T (NO-TOUCH).
  std::string flags = multi < 0 ? "" : "x";
  if (who.no_evict) flags += 'e';
  if (who.no_touch) flags += 'T';
  if (flags.empty()) flags = "N";
  const CommandSpec* last = info_.last_command();
  return fmt::format(
      "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db=0 sub=0 psub=0 ssub=0 "
      "multi={} omem={} events=r cmd={} user={} redir=-1 resp={} lib-name={} lib-ver={}",
      state_.id, state_.addr, state_.laddr, fd_, who.name, (now - state_.created_ms) / 1000,
      (now - info_.last_active_ms()) / 1000, flags, multi, info_.output_bytes(),
      last ? last->name : "NULL", who.user, who.proto, who.lib_name, who.lib_ver);
}

}  // namespace tierkv::server
