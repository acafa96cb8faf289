// Connection: deferred replies. A command whose answer needs flash
// suspends its connection (see connection.h): a GET streamed from a pulled
// flash read, a fetch of flash-only values (retried with backoff), a write
// held until durable. The Store's callbacks run on flash threads (or on
// this one) and only post back to the connection's I/O thread; a read's
// pieces go through an ordered inbox (drain_stream_inbox).
//
// connection.h comes first, as in connection.cc: Asio picks its allocator
// (aligned_alloc or operator new) from what was included before it, and
// every file that includes it must make the same choice.
#include "server/net/connection.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "core/clock.h"
#include "server/commands/transaction.h"
#include "server/net/server.h"

namespace tierkv::server {

std::shared_ptr<void> Connection::inflight_token() {
  server_.deferred_begin();
  Server* server = &server_;
  return std::shared_ptr<void>(nullptr, [server](void*) { server->deferred_end(); });
}

template <typename Fn>
void Connection::post_back(const std::shared_ptr<void>& token, Fn fn) {
  asio::post(thread_.io,
             [self = shared_from_this(), token, fn = std::move(fn)]() mutable { fn(*self); });
}

// Called for every GET when flash is on, so it must not allocate: each
// callback holds only the raw connection and the wait's number (small enough
// for std::function's inline storage). They run only for a flash read, and
// stream_bulk() then keeps the connection alive until on_stream_done.
FlashReadCallbacks Connection::bulk_stream_callbacks() {
  uint64_t gen = ++wait_gen_;
  Connection* c = this;
  FlashReadCallbacks cb;
  cb.on_piece = [c, gen](ValuePiece piece) {
    c->stream_inbox_push(gen, std::move(piece), Status::ok());
  };
  cb.on_done = [c, gen](Status status) {
    c->stream_inbox_push(gen, std::nullopt, std::move(status));
  };
  return cb;
}

void Connection::stream_inbox_push(uint64_t gen, std::optional<ValuePiece> piece, Status done) {
  bool post;
  {
    MutexLock lock(stream_inbox_mu_);
    stream_inbox_.push_back(StreamEvent{gen, std::move(piece), std::move(done)});
    post = !std::exchange(stream_drain_posted_, true);
  }
  // The read's keep-alive (stream_keep_alive_) holds the connection until
  // its on_done is drained, which is the last event of the read.
  if (post) asio::post(thread_.io, [c = this] { c->drain_stream_inbox(); });
}

void Connection::drain_stream_inbox() {
  std::shared_ptr<Connection> self = shared_from_this();  // on_stream_done may drop the last
  std::vector<StreamEvent> events;
  {
    MutexLock lock(stream_inbox_mu_);
    events.swap(stream_inbox_);
    stream_drain_posted_ = false;
  }
  for (StreamEvent& e : events) {
    if (e.piece)
      on_stream_piece(e.gen, std::move(*e.piece));
    else
      on_stream_done(e.gen, e.done);
  }
}

void Connection::stream_bulk(uint64_t length, std::shared_ptr<FlashRead> read) {
  wait_ = StreamWait{.length = length,
                     .queued_before = out_.pending_bytes() + writing_.pending_bytes()};
  stream_read_ = std::move(read);
  stream_keep_alive_ = shared_from_this();
  server_.deferred_begin();
}

ReplyBuffer* Connection::queue_stream(uint64_t length, std::shared_ptr<HeldRead> held) {
  queued_streams_.push_back(
      QueuedStream{.length = length, .held = std::move(held), .after = ReplyBuffer(state_.proto)});
  return &queued_streams_.back().after;
}

void Connection::next_queued_stream() {
  if (out_.pending_bytes() + writing_.pending_bytes() > kPauseReadBytes) {
    wait_ = StreamTurnWait{};
    flush();
    return;
  }
  start_queued_stream();
}

void Connection::start_queued_stream() {
  QueuedStream next = std::move(queued_streams_.front());
  queued_streams_.pop_front();
  stream_after_ = std::move(next.after);
  FlashReadCallbacks callbacks = bulk_stream_callbacks();
  stream_bulk(next.length, server_.context().store().start_held(*next.held, std::move(callbacks)));
}

void Connection::on_stream_piece(uint64_t gen, ValuePiece piece) {
  if (closed_ || !waiting_for<StreamWait>() || gen != wait_gen_) return;
  StreamWait& w = std::get<StreamWait>(wait_);
  if (w.sent + piece.bytes.size() > w.length) {
    spdlog::warn("client id={}: flash read gave more bytes than {}; closing", state_.id, w.length);
    close();
    return;
  }
  if (!w.header_sent) {
    out_.set_proto(state_.proto);
    out_.bulk_header(w.length);
    w.header_sent = true;
  }
  w.sent += piece.bytes.size();
  out_.bulk_piece(piece.bytes, std::move(piece.owner));
  size_t queued = out_.pending_bytes() + writing_.pending_bytes();
  int64_t limit =
      server_.context().limits().client_output_buffer_limit.load(std::memory_order_relaxed);
  if (w.queued_before > 0 && static_cast<int64_t>(queued) > limit) {
    spdlog::info("client id={} addr={} closed: output buffer {} bytes over limit {}", state_.id,
                 state_.addr, queued, limit);
    close();
    return;
  }
  flush();
}

void Connection::on_stream_done(uint64_t gen, const Status& status) {
  // The read's last callback: nothing of it will touch this connection now.
  std::shared_ptr<Connection> self = std::move(stream_keep_alive_);
  stream_read_.reset();
  server_.deferred_end();
  if (closed_ || !waiting_for<StreamWait>() || gen != wait_gen_) return;
  const StreamWait& w = std::get<StreamWait>(wait_);
  bool failed = false;
  if (w.header_sent) {
    // Part of the value is out: the only honest ending is a closed socket.
    if (!status.is_ok() || w.sent != w.length) {
      spdlog::warn("client id={}: flash read stopped after {} of {} bytes ({}); closing", state_.id,
                   w.sent, w.length, status.is_ok() ? "short" : status.to_string());
      close();
      return;
    }
    out_.bulk_end();
  } else if (status.is_ok() && w.length == 0) {
    out_.bulk_header(0);
    out_.bulk_end();
  } else if (status.is_ok() || status.code() != StatusCode::kNotFound) {
    // A miss is what a vanished or corrupt object is; anything else is an
    // error the client should see.
    out_.error(status.is_ok() ? Status(StatusCode::kIOError, "flash read ended early") : status);
    failed = true;
  } else {
    out_.null();
  }
  out_.splice(stream_after_);
  if (!queued_streams_.empty()) return next_queued_stream();
  account(*deferred_spec_, deferred_clock_, failed || deferred_failed_);
  resume();
}

std::vector<std::string_view> Connection::flash_only_keys(const CommandSpec& spec) {
  std::vector<std::string_view> keys;
  Store& store = server_.context().store();
  if (!store.has_flash()) return keys;
  if (spec.flags & kRunsQueue) {
    // EXEC: the values its queued commands read.
    for (std::string_view key : txn_value_keys(state_.txn))
      if (store.needs_flash(key)) keys.push_back(key);
    return keys;
  }
  if (spec.reads_value_if != nullptr && !spec.reads_value_if(inv_)) return keys;
  if ((spec.flags & kCopiesOnFlash) && !flash_copy_declined_) return keys;
  for_each_value_key_index(spec, inv_.argv.size(), [&](size_t i) {
    if (store.needs_flash(inv_.argv[i])) keys.push_back(inv_.argv[i]);
  });
  return keys;
}

bool Connection::start_fetch(const CommandSpec& spec) {
  std::vector<std::string_view> keys = flash_only_keys(spec);
  if (keys.empty()) return false;
  ++fetch_attempts_;
  wait_ = FetchWait{};
  fetch_keys(keys, ++wait_gen_);
  return true;
}

void Connection::fetch_keys(std::span<const std::string_view> keys, uint64_t gen) {
  std::shared_ptr<Connection> self = shared_from_this();
  std::shared_ptr<void> token = inflight_token();
  server_.context().store().fetch(keys, [self, token, gen](Status status) {
    // Whatever the outcome, the command runs again and finds out.
    self->post_back(
        token, [gen, status = std::move(status)](Connection& c) { c.on_fetch_done(gen, status); });
  });
}

bool Connection::retry_fetch(const CommandSpec& spec, uint64_t clock) {
  if (fetch_attempts_ >= kMaxFetchAttempts) {
    // An EXEC that gives up ends its transaction, as any EXEC does.
    if (spec.flags & kRunsQueue) state_.txn.clear();
    // The handler replied nothing: this is its answer.
    (holding_ ? held_ : out_)
        .error(fetch_error_.code() == StatusCode::kOutOfMemory
                   ? fetch_error_
                   : Status::busy("the value keeps leaving memory before the command can run; "
                                  "try again"));
    return false;
  }
  ++fetch_attempts_;
  wait_ = FetchWait{};
  deferred_spec_ = &spec;
  deferred_clock_ = clock;
  uint64_t gen = ++wait_gen_;
  // Backoff: a promotion of the key may be in flight, or memory may be full
  // of offloads that have not landed yet.
  retry_timer_.expires_after(std::chrono::milliseconds(1 << std::min(fetch_attempts_, 8)));
  retry_timer_.async_wait([self = shared_from_this(), gen](const asio::error_code& ec) {
    if (!ec) self->on_retry_due(gen);
  });
  return true;
}

bool Connection::fetch_within(std::string_view key, int64_t bound_ms) {
  const uint64_t now = mono_ns();
  if (fetch_deadline_ns_ == 0) fetch_deadline_ns_ = now + static_cast<uint64_t>(bound_ms) * 1000000;
  // A fetch that failed (no room in memory) would fail again at once.
  if (now >= fetch_deadline_ns_ || !fetch_error_.is_ok()) return false;
  wait_ = FetchWait{};
  const uint64_t gen = ++wait_gen_;
  fetch_keys(std::span(&key, 1), gen);
  // The fetch goes on past the bound: the value lands in memory for the
  // next request, while this one answers a miss now.
  retry_timer_.expires_after(std::chrono::nanoseconds(fetch_deadline_ns_ - now));
  retry_timer_.async_wait([self = shared_from_this(), gen](const asio::error_code& ec) {
    if (!ec) self->on_fetch_done(gen, Status::ok());
  });
  return true;
}

void Connection::on_retry_due(uint64_t gen) {
  if (closed_ || !waiting_for<FetchWait>() || gen != wait_gen_) return;
  std::vector<std::string_view> keys = flash_only_keys(*deferred_spec_);
  if (keys.empty()) return on_fetch_done(gen, Status::ok());
  fetch_keys(keys, gen);
}

void Connection::on_fetch_done(uint64_t gen, const Status& status) {
  if (closed_ || !waiting_for<FetchWait>() || gen != wait_gen_) return;
  if (!status.is_ok()) fetch_error_ = status;
  wait_ = NoWait{};
  retry_timer_.cancel();  // a fetch_within() bound, or a backoff that ended
  uint64_t clock = deferred_clock_;
  if (refused_after_wait()) return;
  run_command(*deferred_spec_, clock);
  if (waiting_for<FetchWait>()) return;  // it needs another fetch
  end_command();
  publish_multi();  // an EXEC that waited for its fetch ended its MULTI
  if (!waiting()) resume();
}

bool Connection::refused_after_wait() {
  // With a pass the key could not move: the migrator waited for it.
  if (fence_pass_) return false;
  std::string refusal =
      cluster_reroute(server_.context(), *deferred_spec_, inv_.argv, state_, fence_pass_);
  if (refusal.empty()) return false;
  server_.stats_for(*deferred_spec_).rejected->add();
  out_.set_proto(state_.proto);
  refuse_routed(state_.txn, deferred_spec_, refusal, out_);
  end_command();
  publish_multi();
  resume();
  return true;
}

void Connection::persist(std::string_view key, uint64_t version) {
  if (Store::DurableCallback done = hold_until_durable())
    server_.context().store().persist(key, version, std::move(done));
}

Store::DurableCallback Connection::hold_until_durable() {
  if (!holding_) return {};  // not a held write: nothing waits for durability
  ++persists_pending_;
  uint64_t gen = wait_gen_;
  std::shared_ptr<Connection> self = shared_from_this();
  std::shared_ptr<void> token = inflight_token();
  return [self, token, gen](Status status) {
    self->post_back(token, [gen, status = std::move(status)](Connection& c) {
      c.on_persist_done(gen, status);
    });
  };
}

void Connection::on_persist_done(uint64_t gen, const Status& status) {
  if (closed_ || gen != wait_gen_) return;
  // Conflict / NotFound: a newer write or a delete replaced this version
  // before it reached flash; the acknowledged write did happen.
  if (!status.is_ok() && status.code() != StatusCode::kConflict &&
      status.code() != StatusCode::kNotFound && persist_error_.is_ok())
    persist_error_ = status;
  if (--persists_pending_ > 0 || !waiting_for<PersistWait>()) return;
  bool failed = !persist_error_.is_ok();
  if (failed) {
    held_.clear();
    queued_streams_.clear();  // the transaction's reply is this error
    out_.set_proto(state_.proto);
    out_.error(fmt::format("IOERR {}", persist_error_.message()));
  } else {
    failed = deferred_failed_;
    out_.splice(held_);
    if (!queued_streams_.empty()) return next_queued_stream();
  }
  account(*deferred_spec_, deferred_clock_, failed);
  resume();
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
  std::shared_ptr<void> token = inflight_token();
  flash_value_->when_room([self, token] {
    self->post_back(token, [](Connection& c) {
      c.flash_room_wait_ = false;
      if (c.closed_) return;
      // Bytes read before the pause may be waiting in the parser.
      c.process_input();
      if (c.query_buffer_over_limit()) return c.close();
      c.flush();
      c.start_read();
    });
  });
}

void Connection::commit_flash_value(const FlashValueSink::Commit& commit) {
  wait_ = CommitWait{};
  uint64_t gen = ++wait_gen_;
  std::shared_ptr<Connection> self = shared_from_this();
  std::shared_ptr<void> token = inflight_token();
  flash_value_->finish(
      commit,
      [self, token, gen](Result<WriteResult> r) {
        Status status = r ? Status::ok() : r.status();
        bool written = r && r->written;
        self->post_back(token, [gen, status = std::move(status), written](Connection& c) {
          c.on_flash_value_committed(gen, status, written);
        });
      },
      exclusive_runner());
}

ExclusiveRunner Connection::exclusive_runner() {
  return server_.context().exec_gate().runner();
}

void Connection::on_flash_value_committed(uint64_t gen, const Status& status, bool written) {
  if (closed_ || !waiting_for<CommitWait>() || gen != wait_gen_) return;
  out_.set_proto(state_.proto);
  bool failed = !status.is_ok();
  if (failed) {
    out_.error(status);
  } else if (written) {
    out_.ok();
  } else {
    out_.null();
  }
  account(*deferred_spec_, deferred_clock_, failed);
  resume();
}

void Connection::after_reply(std::function<void()> work) {
  // Posted handlers run after the one that read this batch, which hands
  // the batch's replies to the socket before it returns (flush).
  asio::post(thread_.io, std::move(work));
}

bool Connection::copy_on_flash(FlashCopyRequest request, CopyReply reply) {
  if (flash_copy_declined_) return false;
  request.durable = holding_;  // fsync=always: the source's tombstone too
  wait_ = CommitWait{.copy_reply = std::move(reply)};
  uint64_t gen = ++wait_gen_;
  std::shared_ptr<Connection> self = shared_from_this();
  std::shared_ptr<void> token = inflight_token();
  server_.context().store().copy_on_flash(
      std::move(request), exclusive_runner(), [self, token, gen](Result<FlashCopyOutcome> r) {
        self->post_back(token,
                        [gen, r = std::move(r)](Connection& c) { c.on_flash_copied(gen, r); });
      });
  return true;
}

void Connection::on_flash_copied(uint64_t gen, const Result<FlashCopyOutcome>& result) {
  if (closed_ || !waiting_for<CommitWait>() || gen != wait_gen_) return;
  if (result && *result == FlashCopyOutcome::kSourceInMemory) {
    // Rerun it; this time it copies in memory.
    flash_copy_declined_ = true;
    wait_ = FetchWait{};
    return on_fetch_done(gen, Status::ok());
  }
  out_.set_proto(state_.proto);
  uint64_t errors_before = out_.error_count();
  ReplyDeferral::CopyReply reply = std::move(std::get<CommitWait>(wait_).copy_reply);
  reply(out_, result);
  account(*deferred_spec_, deferred_clock_, out_.error_count() != errors_before);
  resume();
}

bool Connection::reply_later(ReplyLaterStart start) {
  wait_ = CommitWait{};
  uint64_t gen = ++wait_gen_;
  std::shared_ptr<Connection> self = shared_from_this();
  std::shared_ptr<void> token = inflight_token();
  start([self, token, gen](LaterReply reply) {
    self->post_back(
        token, [gen, reply = std::move(reply)](Connection& c) { c.on_later_reply(gen, reply); });
  });
  return true;
}

void Connection::on_later_reply(uint64_t gen, const LaterReply& reply) {
  if (closed_ || !waiting_for<CommitWait>() || gen != wait_gen_) return;
  out_.set_proto(state_.proto);
  uint64_t errors_before = out_.error_count();
  reply(out_);
  account(*deferred_spec_, deferred_clock_, out_.error_count() != errors_before);
  resume();
}

void Connection::resume() {
  wait_ = NoWait{};
  fence_pass_.reset();  // the command that waited is done
  deferred_spec_ = nullptr;
  if (closed_) return;
  process_input();
  flush();
  start_read();
}

}  // namespace tierkv::server
