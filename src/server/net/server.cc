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
      loading_gauges_(metrics),
      evicted_clients_(&metrics.counter("tierkv_evicted_clients_total",
                                        "clients closed to keep all clients' buffers under "
                                        "maxmemory-clients")),
      clients_(*evicted_clients_) {
  register_commands();
  context_.request_shutdown = [this](bool save) { shutdown(save); };
  context_.list_clients = [this] { return clients_.lines(wall_ms()); };
  context_.info_section = [this](std::string_view section) { return render_info(*this, section); };
  context_.kill_clients = [this](const ClientKillFilter& filter, uint64_t self_id) {
    return clients_.kill(filter, self_id);
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
  tls_handshake_failures_ = &metrics_.counter(
      "tierkv_tls_handshake_failures_total",
      "TLS handshakes that failed (a plaintext client, a bad or missing client certificate)");
  accept_errors_ = &metrics_.counter("tierkv_accept_errors_total",
                                     "accept() failures (out of fds: accepting pauses 100 ms)");
}

Server::~Server() {
  stop();
}

void Server::register_commands() {
  CommandTable& t = context_.mutable_commands();
  register_all_commands(t);
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
  TIERKV_RETURN_IF_ERROR(context_.load_acl_file());
  Config config = context_.config();
  size_t n = config.io_threads > 0 ? static_cast<size_t>(config.io_threads)
                                   : std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 0; i < n; ++i) {
    threads_.push_back(std::make_unique<IoThread>());
    threads_.back()->index = i;
  }
  context_.exec_gate().resize(n);
  asio::io_context& main_io = threads_[0]->io;

  listener_ = std::make_unique<Listener>(
      main_io, *accept_errors_, [this]() -> IoThread& { return pick_thread(); },
      [this](IoThread& t, asio::ip::tcp::socket socket, bool tls) {
        on_tcp(t, std::move(socket), tls);
      },
      [this](IoThread& t, asio::local::stream_protocol::socket socket) {
        const std::string addr = listener_->unix_path() + ":0";
        adopt(t, std::move(socket), addr, addr, /*local=*/true);
      });
  if (config.tls_port > 0) TIERKV_RETURN_IF_ERROR(tls_context_.reload(config));
  context_.reload_tls = [this](const Config& next) {
    return next.tls_port > 0 ? tls_context_.reload(next) : Status::ok();
  };
  TIERKV_RETURN_IF_ERROR(listener_->listen(config.bind, static_cast<int>(config.port),
                                           config.unixsocket, static_cast<int>(config.tls_port)));
  if (config.cluster_enabled) join_cluster(config);

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

  listener_->start();
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
  if (listener_->has_tcp()) spdlog::info("listening on {}:{}", config.bind, tcp_port());
  if (tls_port() > 0) spdlog::info("listening for TLS on {}:{}", config.bind, tls_port());
  if (!listener_->unix_path().empty())
    spdlog::info("listening on unix socket {}", listener_->unix_path());
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
void Server::adopt(IoThread& t, Socket socket, std::string addr, std::string laddr, bool local,
                   std::shared_ptr<asio::ssl::context> tls) {
  total_connections_->add();
  // The socket was accepted onto t's io_context: hand it over there.
  Transport::Socket plain(std::move(socket));
  Transport transport =
      tls ? Transport(std::move(plain), std::move(tls)) : Transport(std::move(plain));
  auto conn = std::make_shared<Connection>(*this, t, std::move(transport), std::move(addr),
                                           std::move(laddr), local);
  asio::post(t.io, [conn] { conn->start(); });
}

void Server::on_tcp(IoThread& t, asio::ip::tcp::socket socket, bool tls) {
  asio::error_code ignored;
  socket.set_option(asio::ip::tcp::no_delay(true), ignored);
  auto remote = socket.remote_endpoint(ignored);
  auto local = socket.local_endpoint(ignored);
  const ServerContext::Limits& l = context_.limits();
  if (protected_mode_refuses(l.protected_mode.load(std::memory_order_relaxed),
                             l.auth_required.load(std::memory_order_relaxed), remote.address())) {
    deny_protected(std::move(socket));
  } else {
    adopt(t, std::move(socket), endpoint_text(remote), endpoint_text(local),
          peer_is_loopback(remote.address()), tls ? tls_context_.get() : nullptr);
  }
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
    if (limit > 0) clients_.evict_over(limit);
    schedule_client_eviction();
  });
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
  MutexLock lock(stop_mu_);
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
    MutexLock lock(stop_mu_);
    while (!stop_requested_) stop_cv_.wait(stop_mu_);
  }
  stop();
}

void Server::join_cluster(const Config& config) {
  // With tls-cluster, clients and peers are sent to the TLS port, as Redis does.
  cluster_ = std::make_unique<ClusterNode>(config, config.tls_cluster ? tls_port() : tcp_port(),
                                           store_, metrics_, context_.cluster_keys_migrated(false),
                                           [this] { return peer_login(); });
  context_.set_cluster({.member = &cluster_->member(),
                        .purger = &cluster_->purger(),
                        .controller = cluster_->controller(),
                        .fence = &cluster_->fence(),
                        .migrator = &cluster_->migrator(),
                        .hints = cluster_->hints(),
                        .handoffs = &cluster_->handoffs()});
}

MigratorCredentials Server::peer_login() const {
  const Config now = context_.config();
  return MigratorCredentials{now.masteruser,
                             now.masterauth.empty() ? now.requirepass : now.masterauth,
                             tls_context_.client()};
}

void Server::stop() {
  {
    MutexLock lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (threads_.empty()) return;
  stopping_.store(true, std::memory_order_release);
  // Close listeners and clients on their own threads, then stop the loops.
  asio::post(threads_[0]->io, [this] {
    asio::error_code ec;
    if (listener_) listener_->close();
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
  // No connection is left to route: leave the cluster (the lease goes now).
  context_.set_cluster({});
  cluster_.reset();
  bool save;
  {
    MutexLock lock(stop_mu_);
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
