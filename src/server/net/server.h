// Server: the I/O threads, and what runs on them besides connections
// (signals, timers, /metrics, shutdown). It owns the Listener, the
// ClientRegistry, and in cluster mode the ClusterNode, which it starts once
// its ports are known and stops once no connection is left.
//
// N I/O threads each run their own asio::io_context. Accepted connections
// are dealt round-robin to the threads and stay on theirs for life, so a
// connection's state is never touched by two threads. Shared state is the
// Store (thread-safe), the metrics (atomics), the configuration
// (ServerContext) and the ClientRegistry (a mutex).
#pragma once

#include <asio.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/metrics.h"
#include "core/mutex.h"
#include "server/cluster/cluster_node.h"
#include "server/commands/command.h"
#include "server/net/client_registry.h"
#include "server/net/listener.h"
#include "server/net/loading.h"
#include "server/net/tls_context.h"

namespace tierkv::server {

class Connection;
class HttpMetricsServer;

struct IoThread {
  size_t index = 0;  // its slot in the ExecGate
  asio::io_context io{1};
  std::thread thread;
  std::unordered_set<Connection*> connections;  // touched only by `thread`
  std::unique_ptr<asio::steady_timer> idle_timer;
};

// Per-command figures for INFO commandstats/latencystats and /metrics.
struct CommandStats {
  Counter* calls = nullptr;
  Counter* rejected = nullptr;
  Counter* failed = nullptr;
  Histogram* latency = nullptr;
};

class Server {
 public:
  Server(Config config, Store& store, MetricsRegistry& metrics);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listeners and starts the I/O threads.
  Status start();
  // Blocks until shutdown() (SIGTERM, SIGINT, SHUTDOWN), then stops.
  void wait();
  // Thread-safe; wait() returns soon after. With `save`, objects only in
  // memory are written to flash before the process ends.
  void shutdown(bool save = true);

  uint16_t tcp_port() const { return listener_ ? listener_->tcp_port() : 0; }
  uint16_t tls_port() const { return listener_ ? listener_->tls_port() : 0; }
  // TLS handshakes that failed (a plaintext client on the TLS port, a bad
  // or missing client certificate).
  Counter& tls_handshake_failures() { return *tls_handshake_failures_; }
  uint16_t metrics_port() const;
  size_t io_thread_count() const { return threads_.size(); }
  ServerContext& context() { return context_; }

  // --- used by connections ---
  const CommandStats& stats_for(const CommandSpec& spec) const {
    return command_stats_[static_cast<size_t>(&spec - context_.commands().all().data())];
  }
  const std::vector<CommandStats>& command_stats() const { return command_stats_; }
  ClientRegistry& clients() { return clients_; }
  size_t client_count() const { return clients_.count(); }
  // CLIENT PAUSE/UNPAUSE: every connection holding a command checks again.
  void wake_paused_clients();
  bool is_identity_command(const CommandSpec* spec) const;
  Counter& commands_processed() { return *commands_processed_; }
  Counter& rejected_connections() { return *rejected_connections_; }
  Counter& total_connections() { return *total_connections_; }
  Counter& accept_errors() { return *accept_errors_; }
  Counter& evicted_clients() { return *evicted_clients_; }
  uint64_t instantaneous_ops() const;
  // Brackets every Store callback that will post back to an I/O thread:
  // stop() waits for all of them to end before it stops the threads.
  void deferred_begin() { deferred_inflight_.fetch_add(1, std::memory_order_relaxed); }
  void deferred_end() { deferred_inflight_.fetch_sub(1, std::memory_order_acq_rel); }
  // The same bracket as a token: the callback ends when its last copy goes.
  std::shared_ptr<void> deferred_token() {
    deferred_begin();
    return std::shared_ptr<void>(nullptr, [this](void*) { deferred_end(); });
  }
  // True once stop() began: new connections are closed at once.
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  // The store's loading figures now, also published to the gauges (INFO and
  // /metrics read them here).
  LoadingFigures loading_figures();

 private:
  void register_commands();
  // Raises the open-files limit for maxclients, or lowers maxclients to fit.
  Status fit_open_files_limit();
  // An accepted TCP socket: refused in protected mode, else adopted.
  void on_tcp(IoThread& t, asio::ip::tcp::socket socket, bool tls);
  // Answers Redis's -DENIED text and closes (protected mode).
  void deny_protected(asio::ip::tcp::socket socket);
  template <typename Socket>
  void adopt(IoThread& t, Socket socket, std::string addr, std::string laddr, bool local,
             std::shared_ptr<asio::ssl::context> tls = nullptr);
  IoThread& pick_thread();
  void schedule_idle_sweep(IoThread& t);
  void schedule_ops_sample();
  // maxmemory-clients, every 100 ms (as Redis's clientsCron): while all
  // clients hold more than the limit, closes the largest that is not
  // NO-EVICT. Each client's own buffers have their own limits, so between
  // two checks the total can pass the limit by what 100 ms of traffic adds.
  void schedule_client_eviction();
  // Until the store has loaded: logs progress, then the figures of the load.
  void watch_loading();
  void stop();
  void wait_for_deferred();
  void persist_memory();

  ServerContext context_;
  Store& store_;
  MetricsRegistry& metrics_;
  LoadingGauges loading_gauges_;
  std::vector<std::unique_ptr<IoThread>> threads_;
  std::atomic<size_t> next_thread_{0};
  std::unique_ptr<Listener> listener_;
  TlsContextHolder tls_context_;
  Counter* tls_handshake_failures_ = nullptr;
  // Cluster mode: this node's part in the cluster; made once the port is
  // known, gone once no connection is left.
  std::unique_ptr<ClusterNode> cluster_;
  void join_cluster(const Config& config);
  // How this node logs in on the others (slot moves, prefetch hints).
  MigratorCredentials peer_login() const;
  std::unique_ptr<asio::signal_set> signals_;
  std::unique_ptr<asio::steady_timer> ops_timer_;
  std::unique_ptr<asio::steady_timer> client_eviction_timer_;
  std::unique_ptr<asio::steady_timer> loading_timer_;
  int64_t loading_logged_ms_ = 0;  // touched on threads_[0] only
  std::unique_ptr<HttpMetricsServer> http_;

  std::vector<CommandStats> command_stats_;
  std::vector<const CommandSpec*> identity_commands_;
  Counter* commands_processed_ = nullptr;
  Counter* rejected_connections_ = nullptr;
  Counter* total_connections_ = nullptr;
  Counter* accept_errors_ = nullptr;
  Counter* evicted_clients_ = nullptr;

  ClientRegistry clients_;

  // instantaneous_ops_per_sec: commands in the last sampled second.
  std::atomic<uint64_t> ops_last_total_{0};
  std::atomic<uint64_t> ops_per_sec_{0};

  Mutex stop_mu_;
  CondVar stop_cv_;
  bool stop_requested_ ABSL_GUARDED_BY(stop_mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
  bool save_on_stop_ ABSL_GUARDED_BY(stop_mu_) = true;
  std::atomic<int64_t> deferred_inflight_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace tierkv::server
