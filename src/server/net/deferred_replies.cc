// DeferredReplies: see deferred_replies.h.
//
// Asio picks its allocator (aligned_alloc or operator new) from what was
// included before it, and every file that includes it must make the same
// choice: deferred_replies.h includes it as connection.h does.
#include "server/net/deferred_replies.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "core/clock.h"
#include "server/commands/transaction.h"
#include "server/net/client_pause.h"
#include "server/net/server.h"

namespace tierkv::server {

DeferredReplies::DeferredReplies(Host& host, Server& server, asio::io_context& io,
                                 ClientState& state, Invocation& inv)
    : host_(host),
      server_(server),
      io_(io),
      state_(state),
      inv_(inv),
      retry_timer_(io),
      pause_timer_(io) {}

ReplyBuffer& DeferredReplies::out() {
  ReplyBuffer& out = host_.replies();
  out.set_proto(state_.proto);
  return out;
}

template <typename Fn>
auto DeferredReplies::posting(Fn on_result) {
  return [this, owner = host_.keep_alive(), token = server_.deferred_token(),
          on_result = std::move(on_result)](auto... args) {
    asio::post(io_, [this, owner, token, on_result, ... args = std::move(args)]() mutable {
      on_result(*this, std::move(args)...);
    });
  };
}

void DeferredReplies::begin_command() {
  fetch_attempts_ = 0;
  fetch_deadline_ns_ = 0;
  fetch_error_ = Status::ok();
  flash_copy_declined_ = false;
}

bool DeferredReplies::fetch_before_run(const CommandSpec& spec, uint64_t clock) {
  // Later runs come from retry_fetch() (with backoff) when a value left
  // memory again.
  if (fetch_attempts_ != 0 || !start_fetch(spec)) return false;
  deferred_spec_ = &spec;
  deferred_clock_ = clock;
  return true;
}

ReplyBuffer& DeferredReplies::begin_run(bool durable_write) {
  fetch_again_ = false;
  holding_ = durable_write;
  if (!holding_) return host_.replies();
  held_.set_proto(state_.proto);
  persists_pending_ = 0;
  persist_error_ = Status::ok();
  next_wait();
  return held_;
}

DeferredReplies::RunEnd DeferredReplies::end_run(const CommandSpec& spec, uint64_t clock,
                                                 const ReplyBuffer& reply, uint64_t errors_before) {
  if (fetch_again_ && retry_fetch(spec, clock)) {
    holding_ = false;
    return RunEnd{.retrying = true, .waiting = true};
  }
  // retry_fetch() may have answered the error that ends the command.
  const bool failed = reply.error_count() != errors_before;
  if (holding_) {
    holding_ = false;
    if (persists_pending_ > 0) {
      wait_ = PersistWait{};
    } else {
      host_.replies().splice(held_);
    }
  }
  if (!waiting() && !queued_streams_.empty()) next_queued_stream();
  if (waiting()) {
    deferred_spec_ = &spec;
    deferred_clock_ = clock;
    deferred_failed_ = failed;
  }
  return RunEnd{.waiting = waiting(), .failed = failed};
}

void DeferredReplies::finish(bool failed) {
  host_.finished(*deferred_spec_, deferred_clock_, failed);
}

void DeferredReplies::end_wait() {
  wait_ = NoWait{};
  deferred_spec_ = nullptr;
}

void DeferredReplies::cancel() {
  // Nothing more will be sent: stop a flash read, and give back the chunk
  // buffers (and pins) queued for the socket.
  if (stream_read_) stream_read_->cancel();
  queued_streams_.clear();
  stream_after_.clear();
  retry_timer_.cancel();
  pause_timer_.cancel();
}

// --- CLIENT PAUSE ---

void DeferredReplies::wait_for_unpause(int64_t until_ms) {
  wait_ = PauseWait{};
  const uint64_t gen = next_wait();
  pause_timer_.expires_after(std::chrono::milliseconds(until_ms - ClientPause::now_ms()));
  pause_timer_.async_wait([this, owner = host_.keep_alive(), gen](const asio::error_code& ec) {
    if (!ec && gen == wait_gen_) host_.recheck_pause();
  });
}

void DeferredReplies::end_pause() {
  wait_ = NoWait{};
  pause_timer_.cancel();
}

// --- streamed reads ---

// Called for every GET when flash is on, so it must not allocate: each
// callback holds only a raw pointer and the wait's number (small enough for
// std::function's inline storage). They run only for a flash read, and
// stream_bulk() then keeps the host alive until on_stream_done.
FlashReadCallbacks DeferredReplies::bulk_stream_callbacks() {
  const uint64_t gen = next_wait();
  DeferredReplies* d = this;
  FlashReadCallbacks cb;
  cb.on_piece = [d, gen](ValuePiece piece) {
    d->stream_inbox_push(gen, std::move(piece), Status::ok());
  };
  cb.on_done = [d, gen](Status status) {
    d->stream_inbox_push(gen, std::nullopt, std::move(status));
  };
  return cb;
}

void DeferredReplies::stream_inbox_push(uint64_t gen, std::optional<ValuePiece> piece,
                                        Status done) {
  bool post;
  {
    MutexLock lock(stream_inbox_mu_);
    stream_inbox_.push_back(StreamEvent{gen, std::move(piece), std::move(done)});
    post = !std::exchange(stream_drain_posted_, true);
  }
  // The read's keep-alive (stream_keep_alive_) holds the host until its
  // on_done is drained, which is the last event of the read.
  if (post) asio::post(io_, [d = this] { d->drain_stream_inbox(); });
}

void DeferredReplies::drain_stream_inbox() {
  std::shared_ptr<void> owner = host_.keep_alive();  // on_stream_done may drop the last
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

void DeferredReplies::stream_bulk(uint64_t length, std::shared_ptr<FlashRead> read) {
  wait_ = StreamWait{.length = length, .queued_before = host_.unsent_bytes()};
  stream_read_ = std::move(read);
  stream_keep_alive_ = host_.keep_alive();
  server_.deferred_begin();
}

ReplyBuffer* DeferredReplies::queue_stream(uint64_t length, std::shared_ptr<HeldRead> held) {
  queued_streams_.push_back(
      QueuedStream{.length = length, .held = std::move(held), .after = ReplyBuffer(state_.proto)});
  return &queued_streams_.back().after;
}

void DeferredReplies::on_sent() {
  if (waiting_for<StreamTurnWait>()) next_queued_stream();
}

void DeferredReplies::next_queued_stream() {
  if (host_.unsent_bytes() > kStreamTurnBytes) {
    wait_ = StreamTurnWait{};
    host_.send();
    return;
  }
  start_queued_stream();
}

void DeferredReplies::start_queued_stream() {
  QueuedStream next = std::move(queued_streams_.front());
  queued_streams_.pop_front();
  stream_after_ = std::move(next.after);
  FlashReadCallbacks callbacks = bulk_stream_callbacks();
  stream_bulk(next.length, server_.context().store().start_held(*next.held, std::move(callbacks)));
}

void DeferredReplies::on_stream_piece(uint64_t gen, ValuePiece piece) {
  if (!current(gen) || !waiting_for<StreamWait>()) return;
  StreamWait& w = std::get<StreamWait>(wait_);
  if (w.sent + piece.bytes.size() > w.length) {
    spdlog::warn("client id={}: flash read gave more bytes than {}; closing", state_.id, w.length);
    return host_.close();
  }
  ReplyBuffer& reply = out();
  if (!w.header_sent) {
    reply.bulk_header(w.length);
    w.header_sent = true;
  }
  w.sent += piece.bytes.size();
  reply.bulk_piece(piece.bytes, std::move(piece.owner));
  const size_t queued = host_.unsent_bytes();
  const int64_t limit =
      server_.context().limits().client_output_buffer_limit.load(std::memory_order_relaxed);
  if (w.queued_before > 0 && static_cast<int64_t>(queued) > limit) {
    spdlog::info("client id={} addr={} closed: output buffer {} bytes over limit {}", state_.id,
                 state_.addr, queued, limit);
    return host_.close();
  }
  host_.send();
}

void DeferredReplies::on_stream_done(uint64_t gen, const Status& status) {
  // The read's last callback: nothing of it will touch this object now.
  std::shared_ptr<void> owner = std::move(stream_keep_alive_);
  stream_read_.reset();
  server_.deferred_end();
  if (!current(gen) || !waiting_for<StreamWait>()) return;
  const StreamWait& w = std::get<StreamWait>(wait_);
  ReplyBuffer& reply = out();
  bool failed = false;
  if (w.header_sent) {
    // Part of the value is out: the only honest ending is a closed socket.
    if (!status.is_ok() || w.sent != w.length) {
      spdlog::warn("client id={}: flash read stopped after {} of {} bytes ({}); closing", state_.id,
                   w.sent, w.length, status.is_ok() ? "short" : status.to_string());
      return host_.close();
    }
    reply.bulk_end();
  } else if (status.is_ok() && w.length == 0) {
    reply.bulk_header(0);
    reply.bulk_end();
  } else if (status.is_ok() || status.code() != StatusCode::kNotFound) {
    // A miss is what a vanished or corrupt object is; anything else is an
    // error the client should see.
    reply.error(status.is_ok() ? Status(StatusCode::kIOError, "flash read ended early") : status);
    failed = true;
  } else {
    reply.null();
  }
  reply.splice(stream_after_);
  if (!queued_streams_.empty()) return next_queued_stream();
  finish(failed || deferred_failed_);
}

// --- fetches of flash-only values ---

std::vector<std::string_view> DeferredReplies::flash_only_keys(const CommandSpec& spec) {
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

bool DeferredReplies::start_fetch(const CommandSpec& spec) {
  std::vector<std::string_view> keys = flash_only_keys(spec);
  if (keys.empty()) return false;
  ++fetch_attempts_;
  wait_ = FetchWait{};
  fetch_keys(keys, next_wait());
  return true;
}

void DeferredReplies::fetch_keys(std::span<const std::string_view> keys, uint64_t gen) {
  // Whatever the outcome, the command runs again and finds out.
  server_.context().store().fetch(
      keys, posting([gen](DeferredReplies& d, Status status) { d.on_fetch_done(gen, status); }));
}

bool DeferredReplies::retry_fetch(const CommandSpec& spec, uint64_t clock) {
  if (fetch_attempts_ >= kMaxFetchAttempts) {
    // An EXEC that gives up ends its transaction, as any EXEC does.
    if (spec.flags & kRunsQueue) state_.txn.clear();
    // The handler replied nothing: this is its answer.
    (holding_ ? held_ : out())
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
  const uint64_t gen = next_wait();
  // Backoff: a promotion of the key may be in flight, or memory may be full
  // of offloads that have not landed yet.
  retry_timer_.expires_after(std::chrono::milliseconds(1 << std::min(fetch_attempts_, 8)));
  retry_timer_.async_wait([this, owner = host_.keep_alive(), gen](const asio::error_code& ec) {
    if (!ec) on_retry_due(gen);
  });
  return true;
}

bool DeferredReplies::fetch_within(std::string_view key, int64_t bound_ms) {
  const uint64_t now = mono_ns();
  if (fetch_deadline_ns_ == 0) fetch_deadline_ns_ = now + static_cast<uint64_t>(bound_ms) * 1000000;
  // A fetch that failed (no room in memory) would fail again at once.
  if (now >= fetch_deadline_ns_ || !fetch_error_.is_ok()) return false;
  wait_ = FetchWait{};
  const uint64_t gen = next_wait();
  fetch_keys(std::span(&key, 1), gen);
  // The fetch goes on past the bound: the value lands in memory for the
  // next request, while this one answers a miss now.
  retry_timer_.expires_after(std::chrono::nanoseconds(fetch_deadline_ns_ - now));
  retry_timer_.async_wait([this, owner = host_.keep_alive(), gen](const asio::error_code& ec) {
    if (!ec) on_fetch_done(gen, Status::ok());
  });
  return true;
}

void DeferredReplies::on_retry_due(uint64_t gen) {
  if (!current(gen) || !waiting_for<FetchWait>()) return;
  std::vector<std::string_view> keys = flash_only_keys(*deferred_spec_);
  if (keys.empty()) return on_fetch_done(gen, Status::ok());
  fetch_keys(keys, gen);
}

void DeferredReplies::on_fetch_done(uint64_t gen, const Status& status) {
  if (!current(gen) || !waiting_for<FetchWait>()) return;
  if (!status.is_ok()) fetch_error_ = status;
  wait_ = NoWait{};
  retry_timer_.cancel();  // a fetch_within() bound, or a backoff that ended
  host_.run_again(*deferred_spec_, deferred_clock_);
}

// --- durable writes ---

void DeferredReplies::persist(std::string_view key, uint64_t version) {
  if (Store::DurableCallback done = hold_until_durable())
    server_.context().store().persist(key, version, std::move(done));
}

Store::DurableCallback DeferredReplies::hold_until_durable() {
  if (!holding_) return {};  // not a held write: nothing waits for durability
  ++persists_pending_;
  return posting(
      [gen = wait_gen_](DeferredReplies& d, Status status) { d.on_persist_done(gen, status); });
}

void DeferredReplies::on_persist_done(uint64_t gen, const Status& status) {
  if (!current(gen)) return;
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
    out().error(fmt::format("IOERR {}", persist_error_.message()));
  } else {
    failed = deferred_failed_;
    host_.replies().splice(held_);
    if (!queued_streams_.empty()) return next_queued_stream();
  }
  finish(failed);
}

// --- work finished by a store worker ---

void DeferredReplies::commit_flash_value(const FlashValueSink::Commit& commit) {
  wait_ = CommitWait{};
  const uint64_t gen = next_wait();
  inv_.flash_value->finish(commit, posting([gen](DeferredReplies& d, Result<WriteResult> r) {
                             d.on_flash_value_committed(gen, r ? Status::ok() : r.status(),
                                                        r && r->written);
                           }),
                           server_.context().exec_gate().runner());
}

void DeferredReplies::on_flash_value_committed(uint64_t gen, const Status& status, bool written) {
  if (!current(gen) || !waiting_for<CommitWait>()) return;
  ReplyBuffer& reply = out();
  const bool failed = !status.is_ok();
  if (failed) {
    reply.error(status);
  } else if (written) {
    reply.ok();
  } else {
    reply.null();
  }
  finish(failed);
}

void DeferredReplies::after_reply(std::function<void()> work) {
  // Posted handlers run after the one that read this batch, which hands
  // the batch's replies to the socket before it returns.
  asio::post(io_, std::move(work));
}

bool DeferredReplies::copy_on_flash(FlashCopyRequest request, CopyReply reply) {
  if (flash_copy_declined_) return false;
  request.durable = holding_;  // fsync=always: the source's tombstone too
  wait_ = CommitWait{.copy_reply = std::move(reply)};
  const uint64_t gen = next_wait();
  server_.context().store().copy_on_flash(
      std::move(request), server_.context().exec_gate().runner(),
      posting(
          [gen](DeferredReplies& d, Result<FlashCopyOutcome> r) { d.on_flash_copied(gen, r); }));
  return true;
}

void DeferredReplies::on_flash_copied(uint64_t gen, const Result<FlashCopyOutcome>& result) {
  if (!current(gen) || !waiting_for<CommitWait>()) return;
  if (result && *result == FlashCopyOutcome::kSourceInMemory) {
    // Rerun it; this time it copies in memory.
    flash_copy_declined_ = true;
    wait_ = FetchWait{};
    return on_fetch_done(gen, Status::ok());
  }
  ReplyBuffer& reply = out();
  const uint64_t errors_before = reply.error_count();
  CopyReply copy_reply = std::move(std::get<CommitWait>(wait_).copy_reply);
  copy_reply(reply, result);
  finish(reply.error_count() != errors_before);
}

bool DeferredReplies::reply_later(ReplyLaterStart start) {
  wait_ = CommitWait{};
  const uint64_t gen = next_wait();
  start(posting([gen](DeferredReplies& d, LaterReply reply) { d.on_later_reply(gen, reply); }));
  return true;
}

void DeferredReplies::on_later_reply(uint64_t gen, const LaterReply& reply) {
  if (!current(gen) || !waiting_for<CommitWait>()) return;
  ReplyBuffer& out_reply = out();
  const uint64_t errors_before = out_reply.error_count();
  reply(out_reply);
  finish(out_reply.error_count() != errors_before);
}

}  // namespace tierkv::server
