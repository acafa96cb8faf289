#include "server/net/server.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "server/net/connection.h"
#include "server/net/hardening.h"
#include "server/observe/http_metrics.h"
#include "server/observe/info.h"

namespace tierkv::server {
namespace {

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

template <typename Endpoint>
std::string endpoint_text(const Endpoint& ep) {
  return fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

}  // namespace

Server::Server(Config config, Store& store, MetricsRegistry& metrics)
    : context_(std::move(config), store, metrics),
      store_(store),
      metrics_(metrics),
      loading_gauges_(metrics) {
  register_commands();
  context_.request_shutdown = [this](bool save) { shutdown(save); };
  context_.list_clients = [this] { return client_lines(); };
  context_.info_section = [this](std::string_view section) { return render_info(*this, section); };
  context_.kill_clients = [this](const ClientKillFilter& filter, uint64_t self_id) {
    return kill_clients(filter, self_id);
  };
  context_.wake_paused_clients = [this] { wake_paused_clients(); };
  context_.account_queued = [this](const CommandSpec& spec, uint64_t ns, bool failed) {
    const CommandStats& stats = stats_for(spec);
    stats.latency->record(ns);
    stats.calls->add();
    if (failed) stats.failed->add();
    commands_processed().add();
  };
  commands_processed_ = &metrics_.counter("tierkv_commands_processed_total", "commands executed");
  rejected_connections_ = &metrics_.counter("tierkv_rejected_connections_total",
                                            "connections refused (maxclients, protected mode)");
  total_connections_ =
      &metrics_.counter("tierkv_connections_received_total", "connections accepted");
  accept_errors_ = &metrics_.counter("tierkv_accept_errors_total",
                                     "accept() failures (out of fds: accepting pauses 100 ms)");
  evicted_clients_ = &metrics_.counter("tierkv_evicted_clients_total",
                                       "clients closed to keep all clients' buffers under "
                                       "maxmemory-clients");
}

Server::~Server() {
  stop();
}

void Server::register_commands() {
  CommandTable& t = context_.mutable_commands();
  register_connection_commands(t);
  register_client_commands(t);
  register_server_commands(t);
  register_string_commands(t);
  register_counter_commands(t);
  register_key_commands(t);
  register_bit_commands(t);
  register_lcs_commands(t);
  register_bitfield_commands(t);
  register_tier_commands(t);
  register_stream_commands(t);
  register_txn_commands(t);
  register_rename_commands(t);
  register_object_commands(t);
  register_slowlog_commands(t);
  register_preheat_commands(t);
  for (const CommandSpec& spec : t.all()) {
    std::string label = fmt::format("cmd=\"{}\"", spec.name);
    CommandStats s;
    s.calls = &metrics_.counter("tierkv_command_calls_total", "calls per command", label);
    s.rejected = &metrics_.counter("tierkv_command_rejected_calls_total",
                                   "calls refused before running (arity, auth)", label);
    s.failed = &metrics_.counter("tierkv_command_failed_calls_total",
                                 "calls that answered an error", label);
    s.latency = &metrics_.latency("tierkv_command_latency_seconds", "command latency", label);
    command_stats_.push_back(s);
  }
  for (std::string_view name : {"auth", "hello", "client", "reset"}) {
    if (const CommandSpec* spec = t.find(name)) identity_commands_.push_back(spec);
  }
}

bool Server::is_identity_command(const CommandSpec* spec) const {
  for (const CommandSpec* s : identity_commands_) {
    if (s == spec) return true;
  }
  return false;
}

Status Server::fit_open_files_limit() {
  Config config = context_.config();
  int64_t reserve = fd_reserve(config);
  OpenFilesFit fit = fit_open_files(config.maxclients, reserve);
  if (fit.maxclients >= config.maxclients) return Status::ok();
  if (fit.maxclients < 1)
    return Status::unavailable(fmt::format(
        "the open files limit (ulimit -n) of {} is not enough for the server to start: raise it "
        "to at least {}",
        fit.limit, reserve + 1));
  spdlog::warn(
      "You requested maxclients of {} requiring at least {} max file descriptors; the open files "
      "limit could not be raised ({}). maxclients has been reduced to {} to compensate for the "
      "open files limit of {}. If you need higher maxclients increase 'ulimit -n'.",
      config.maxclients, config.maxclients + reserve, std::strerror(fit.raise_errno),
      fit.maxclients, fit.limit);
  return context_.set_config("maxclients", std::to_string(fit.maxclients));
}

Status Server::start() {
  TIERKV_RETURN_IF_ERROR(fit_open_files_limit());
  Config config = context_.config();
  size_t n = config.io_threads > 0 ? static_cast<size_t>(config.io_threads)
                                   : std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 0; i < n; ++i) {
    threads_.push_back(std::make_unique<IoThread>());
    threads_.back()->index = i;
  }
  context_.exec_gate().resize(n);
  asio::io_context& main_io = threads_[0]->io;

  try {
    if (config.port > 0) {
      asio::ip::tcp::endpoint ep(asio::ip::make_address(config.bind),
                                 static_cast<uint16_t>(config.port));
      tcp_acceptor_ = std::make_unique<asio::ip::tcp::acceptor>(main_io);
      tcp_acceptor_->open(ep.protocol());
      tcp_acceptor_->set_option(asio::socket_base::reuse_address(true));
      tcp_acceptor_->bind(ep);
      tcp_acceptor_->listen(asio::socket_base::max_listen_connections);
      tcp_port_ = tcp_acceptor_->local_endpoint().port();
    }
    if (!config.unixsocket.empty()) {
      unix_path_ = config.unixsocket;
      std::remove(unix_path_.c_str());
      unix_acceptor_ = std::make_unique<asio::local::stream_protocol::acceptor>(
          main_io, asio::local::stream_protocol::endpoint(unix_path_));
    }
  } catch (const std::system_error& e) {
    return Status::unavailable(fmt::format("cannot listen: {}", e.what()));
  }
  if (!tcp_acceptor_ && !unix_acceptor_)
    return Status::invalid_argument("nothing to listen on: port is 0 and no unixsocket");

  if (config.metrics_port > 0) {
    http_ = std::make_unique<HttpMetricsServer>(*this, main_io);
    TIERKV_RETURN_IF_ERROR(
        http_->listen(config.metrics_bind, static_cast<uint16_t>(config.metrics_port)));
  }

  signals_ = std::make_unique<asio::signal_set>(main_io, SIGINT, SIGTERM);
  signals_->async_wait([this](const asio::error_code& ec, int sig) {
    if (ec) return;
    spdlog::info("signal {} received, shutting down", sig);
    shutdown();
  });
  std::signal(SIGPIPE, SIG_IGN);

  if (tcp_acceptor_) accept_tcp();
  if (unix_acceptor_) accept_unix();
  for (auto& t : threads_) schedule_idle_sweep(*t);
  schedule_ops_sample();
  schedule_client_eviction();
  watch_loading();
  for (auto& t : threads_) {
    IoThread* raw = t.get();
    raw->thread = std::thread([raw] {
      auto guard = asio::make_work_guard(raw->io);
      raw->io.run();
    });
  }

  StoreStats st = store_.stats();
  if (tcp_acceptor_) spdlog::info("listening on {}:{}", config.bind, tcp_port_);
  if (unix_acceptor_) spdlog::info("listening on unix socket {}", unix_path_);
  if (http_) spdlog::info("metrics on http://{}:{}/metrics", config.metrics_bind, http_->port());
  spdlog::info("memory budget {} bytes, eviction policy {}, chunk size {}, io threads {}",
               st.memory.budget_bytes, name_of(config.eviction_policy), config.chunk_size, n);
  return Status::ok();
}

uint16_t Server::metrics_port() const {
  return http_ ? http_->port() : 0;
}

IoThread& Server::pick_thread() {
  return *threads_[next_thread_.fetch_add(1, std::memory_order_relaxed) % threads_.size()];
}

template <typename Socket>
void Server::adopt(IoThread& t, Socket socket, std::string addr, std::string laddr) {
  total_connections_->add();
  // The socket was accepted onto t's io_context: hand it over there.
  auto conn = std::make_shared<Connection>(*this, t, Connection::Socket(std::move(socket)),
                                           std::move(addr), std::move(laddr));
  asio::post(t.io, [conn] { conn->start(); });
}

void Server::accept_tcp() {
  IoThread& t = pick_thread();
  tcp_acceptor_->async_accept(t.io, [this, &t](const asio::error_code& ec,
                                               asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) return accept_again(ec, &Server::accept_tcp);
    accept_paused_logged_ = false;
    asio::error_code ignored;
    socket.set_option(asio::ip::tcp::no_delay(true), ignored);
    auto remote = socket.remote_endpoint(ignored);
    auto local = socket.local_endpoint(ignored);
    const ServerContext::Limits& l = context_.limits();
    if (protected_mode_refuses(l.protected_mode.load(std::memory_order_relaxed),
                               l.auth_required.load(std::memory_order_relaxed), remote.address())) {
      deny_protected(std::move(socket));
    } else {
      adopt(t, std::move(socket), endpoint_text(remote), endpoint_text(local));
    }
    accept_tcp();
  });
}

void Server::deny_protected(asio::ip::tcp::socket socket) {
  rejected_connections_->add();
  auto s = std::make_shared<asio::ip::tcp::socket>(std::move(socket));
  asio::async_write(*s, asio::buffer(kProtectedModeDenied), [s](const asio::error_code&, size_t) {
    asio::error_code ignored;
    s->shutdown(asio::socket_base::shutdown_both, ignored);
    s->close(ignored);
  });
}

void Server::accept_unix() {
  IoThread& t = pick_thread();
  unix_acceptor_->async_accept(
      t.io, [this, &t](const asio::error_code& ec, asio::local::stream_protocol::socket socket) {
        if (ec == asio::error::operation_aborted) return;
        if (ec) return accept_again(ec, &Server::accept_unix);
        accept_paused_logged_ = false;
        adopt(t, std::move(socket), unix_path_ + ":0", unix_path_ + ":0");
        accept_unix();
      });
}

// Runs on threads_[0], where the acceptors' handlers run.
void Server::accept_again(const asio::error_code& ec, void (Server::*accept)()) {
  accept_errors_->add();
  if (!accept_error_pauses(ec)) {
    spdlog::warn("accept failed: {}", ec.message());
    return (this->*accept)();
  }
  // Out of descriptors (or memory): the pending connection stays in the
  // backlog and accept() would fail again at once. Pause; clients closing
  // free fds.
  if (!accept_paused_logged_)
    spdlog::warn("accept failed: {}; pausing accepts for 100 ms at a time until it succeeds",
                 ec.message());
  accept_paused_logged_ = true;
  auto timer =
      std::make_shared<asio::steady_timer>(threads_[0]->io, std::chrono::milliseconds(100));
  timer->async_wait([this, timer, accept](const asio::error_code& wait_ec) {
    if (wait_ec || stopping()) return;
    (this->*accept)();
  });
}

void Server::schedule_idle_sweep(IoThread& t) {
  if (!t.idle_timer) t.idle_timer = std::make_unique<asio::steady_timer>(t.io);
  t.idle_timer->expires_after(std::chrono::seconds(1));
  t.idle_timer->async_wait([this, &t](const asio::error_code& ec) {
    if (ec) return;
    int64_t timeout_s = context_.limits().timeout_s.load(std::memory_order_relaxed);
    if (timeout_s > 0) {
      int64_t now = wall_ms();
      std::vector<Connection*> conns(t.connections.begin(), t.connections.end());
      for (Connection* c : conns) c->check_idle(now, timeout_s * 1000);
    }
    schedule_idle_sweep(t);
  });
}

void Server::schedule_ops_sample() {
  if (!ops_timer_) ops_timer_ = std::make_unique<asio::steady_timer>(threads_[0]->io);
  ops_timer_->expires_after(std::chrono::seconds(1));
  ops_timer_->async_wait([this](const asio::error_code& ec) {
    if (ec) return;
    uint64_t total = commands_processed_->value();
    ops_per_sec_.store(total - ops_last_total_.exchange(total));
    schedule_ops_sample();
  });
}

void Server::schedule_client_eviction() {
  if (!client_eviction_timer_)
    client_eviction_timer_ = std::make_unique<asio::steady_timer>(threads_[0]->io);
  client_eviction_timer_->expires_after(std::chrono::milliseconds(100));
  client_eviction_timer_->async_wait([this](const asio::error_code& ec) {
    if (ec) return;
    const int64_t limit = context_.limits().maxmemory_clients.load(std::memory_order_relaxed);
    if (limit > 0) evict_clients(limit);
    schedule_client_eviction();
  });
}

void Server::evict_clients(int64_t limit) {
  std::lock_guard lock(clients_mu_);
  uint64_t total = 0;
  std::vector<std::pair<uint64_t, Connection*>> evictable;
  for (const auto& [id, c] : clients_) {
    const uint64_t bytes = c->memory_bytes();
    total += bytes;
    if (bytes > 0 && !c->no_evict()) evictable.emplace_back(bytes, c);
  }
  if (total <= static_cast<uint64_t>(limit)) return;
  std::sort(evictable.begin(), evictable.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [bytes, c] : evictable) {
    if (total <= static_cast<uint64_t>(limit)) break;
    // Registered means alive while clients_mu_ is held (see kill_clients).
    if (!c->kill()) continue;
    total -= bytes;
    evicted_clients_->add();
    spdlog::warn(
        "client id={} addr={} closed: it holds {} bytes, and all clients more than "
        "maxmemory-clients ({})",
        c->id(), c->addr(), bytes, limit);
  }
}

LoadingFigures Server::loading_figures() {
  LoadingFigures f = server::loading_figures(store_, wall_ms());
  loading_gauges_.publish(f);
  return f;
}

void Server::watch_loading() {
  constexpr int64_t kProgressLogMs = 5000;
  LoadingFigures f = loading_figures();
  if (!f.loading) {
    if (f.flash) spdlog::info("{}; ready for data commands", loading_done_line(f));
    return;
  }
  int64_t now = wall_ms();
  if (loading_logged_ms_ == 0) {
    loading_logged_ms_ = now;
    spdlog::info(
        "loading the flash index in the background: data commands answer -LOADING "
        "until it is ready");
  } else if (now - loading_logged_ms_ >= kProgressLogMs) {
    loading_logged_ms_ = now;
    spdlog::info("{}", loading_progress_line(f));
  }
  if (!loading_timer_) loading_timer_ = std::make_unique<asio::steady_timer>(threads_[0]->io);
  loading_timer_->expires_after(std::chrono::milliseconds(100));
  loading_timer_->async_wait([this](const asio::error_code& ec) {
    if (!ec) watch_loading();
  });
}

uint64_t Server::instantaneous_ops() const {
  return ops_per_sec_.load();
}

bool Server::register_client(Connection* c) {
  int64_t max = context_.limits().maxclients.load(std::memory_order_relaxed);
  std::lock_guard lock(clients_mu_);
  if (static_cast<int64_t>(clients_.size()) >= max) return false;
  clients_.emplace(c->id(), c);
  client_count_.store(clients_.size(), std::memory_order_relaxed);
  return true;
}

void Server::unregister_client(Connection* c) {
  std::lock_guard lock(clients_mu_);
  clients_.erase(c->id());
  client_count_.store(clients_.size(), std::memory_order_relaxed);
}

std::vector<std::string> Server::client_lines() const {
  int64_t now = wall_ms();
  std::lock_guard lock(clients_mu_);
  std::vector<std::pair<uint64_t, std::string>> lines;
  for (const auto& [id, c] : clients_) lines.emplace_back(id, c->describe(now));
  std::sort(lines.begin(), lines.end());
  std::vector<std::string> out;
  for (auto& [id, line] : lines) out.push_back(std::move(line));
  return out;
}

ClientKillResult Server::kill_clients(const ClientKillFilter& filter, uint64_t self_id) {
  ClientKillResult out;
  std::lock_guard lock(clients_mu_);
  if (filter.match_none) return out;
  for (const auto& [id, c] : clients_) {
    if (filter.id && *filter.id != id) continue;
    if (filter.addr && *filter.addr != c->addr()) continue;
    if (filter.laddr && *filter.laddr != c->laddr()) continue;
    if (id == self_id) {
      out.matched_self = true;
    } else {
      // Registered means not closed yet, so the connection is alive while
      // clients_mu_ is held; it closes on its own thread. One already
      // killed is closing: as in Redis, it is not killed (counted) twice.
      if (c->kill()) ++out.others;
    }
  }
  return out;
}

void Server::wake_paused_clients() {
  for (auto& t : threads_) {
    IoThread* raw = t.get();
    asio::post(raw->io, [raw] {
      std::vector<Connection*> conns(raw->connections.begin(), raw->connections.end());
      for (Connection* c : conns) c->recheck_pause();
    });
  }
}

void Server::shutdown(bool save) {
  std::lock_guard lock(stop_mu_);
  stop_requested_ = true;
  save_on_stop_ = save;
  stop_cv_.notify_all();
}

void Server::wait_for_deferred() {
  // Flash callbacks finish in milliseconds; the bound only guards against
  // a device that never answers.
  constexpr auto kMaxWait = std::chrono::seconds(10);
  auto deadline = std::chrono::steady_clock::now() + kMaxWait;
  while (deferred_inflight_.load(std::memory_order_acquire) > 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      spdlog::warn("{} flash callbacks still pending at shutdown",
                   deferred_inflight_.load(std::memory_order_relaxed));
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Server::persist_memory() {
  if (!store_.has_flash()) return;
  uint64_t written_before = store_.stats().flash.user_write_bytes;
  auto start = std::chrono::steady_clock::now();
  Status st = store_.close_cleanly();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                  start)
                .count();
  StoreStats after = store_.stats();
  if (!st.is_ok()) {
    spdlog::error("writing memory to flash at shutdown failed after {} ms: {}", ms, st.to_string());
    return;
  }
  spdlog::info("wrote {} bytes to flash at shutdown in {} ms ({} objects on flash)",
               after.flash.user_write_bytes - written_before, ms, after.flash.objects);
}

void Server::wait() {
  {
    std::unique_lock lock(stop_mu_);
    stop_cv_.wait(lock, [this] { return stop_requested_; });
  }
  stop();
}

void Server::stop() {
  {
    std::lock_guard lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (threads_.empty()) return;
  stopping_.store(true, std::memory_order_release);
  // Close listeners and clients on their own threads, then stop the loops.
  asio::post(threads_[0]->io, [this] {
    asio::error_code ec;
    if (tcp_acceptor_) tcp_acceptor_->close(ec);
    if (unix_acceptor_) unix_acceptor_->close(ec);
    if (signals_) signals_->cancel(ec);
    if (ops_timer_) ops_timer_->cancel();
    if (client_eviction_timer_) client_eviction_timer_->cancel();
    if (loading_timer_) loading_timer_->cancel();
    if (http_) http_->stop();
  });
  std::atomic<size_t> swept{0};
  for (auto& t : threads_) {
    IoThread* raw = t.get();
    asio::post(raw->io, [raw, &swept] {
      std::vector<Connection*> conns(raw->connections.begin(), raw->connections.end());
      for (Connection* c : conns) c->close();
      if (raw->idle_timer) raw->idle_timer->cancel();
      swept.fetch_add(1, std::memory_order_release);
    });
  }
  // Once every client is closed no new flash work starts; callbacks of the
  // reads and writes under way still post to the threads: let them land
  // before the threads stop.
  bool running = threads_.front()->thread.joinable();  // start() may have failed early
  while (running && swept.load(std::memory_order_acquire) < threads_.size())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (running) wait_for_deferred();
  for (auto& t : threads_) {
    // Let the posted closes run, then stop.
    asio::post(t->io, [raw = t.get()] { raw->io.stop(); });
  }
  for (auto& t : threads_) {
    if (t->thread.joinable()) t->thread.join();
  }
  if (!unix_path_.empty()) std::remove(unix_path_.c_str());
  bool save;
  {
    std::lock_guard lock(stop_mu_);
    save = save_on_stop_;
  }
  if (store_.loading()) {
    // Nothing was written while loading: there is nothing to persist.
    spdlog::info("shutdown while the flash index loads: nothing to write to flash");
  } else if (save) {
    persist_memory();
  } else {
    spdlog::info("SHUTDOWN NOSAVE: memory-only objects not written to flash");
  }
  spdlog::info("server stopped");
}

}  // namespace tierkv::server
