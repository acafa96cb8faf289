#include "server/observe/http_metrics.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>

#include "server/net/hardening.h"
#include "server/net/server.h"
#include "server/observe/info.h"
#include "server/observe/sizing.h"

namespace tierkv::server {
namespace {

constexpr size_t kMaxRequest = 8 * 1024;

// One HTTP exchange: read the request head, answer, close. The whole
// exchange has `timeout` to finish; then the socket is closed.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(const HttpMetricsServer& owner, asio::ip::tcp::socket socket,
              std::shared_ptr<int64_t> sessions, Counter& timeouts)
      : owner_(owner),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        sessions_(std::move(sessions)),
        timeouts_(timeouts) {
    ++*sessions_;
  }
  ~HttpSession() { --*sessions_; }

  void start(std::chrono::milliseconds timeout) {
    timer_.expires_after(timeout);
    timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
      if (ec) return;  // answered in time
      self->timeouts_.add();
      self->close();
    });
    read();
  }

 private:
  void close() {
    asio::error_code ignored;
    timer_.cancel();
    socket_.shutdown(asio::socket_base::shutdown_both, ignored);
    socket_.close(ignored);
  }

  void read() {
    auto self = shared_from_this();
    size_t old = request_.size();
    request_.resize(old + 1024);
    socket_.async_read_some(asio::buffer(request_.data() + old, 1024),
                            [self, old](const asio::error_code& ec, size_t n) {
                              self->request_.resize(old + n);
                              if (ec) return self->close();
                              self->on_read();
                            });
  }

  void on_read() {
    if (request_.find("\r\n\r\n") == std::string::npos) {
      if (request_.size() > kMaxRequest) return respond(431, "text/plain", "request too large\n");
      return read();
    }
    std::string_view line(request_.data(), request_.find("\r\n"));
    bool is_get = line.starts_with("GET ");
    bool is_head = line.starts_with("HEAD ");
    if (!is_get && !is_head) return respond(405, "text/plain", "method not allowed\n");
    std::string_view target = line.substr(line.find(' ') + 1);
    target = target.substr(0, target.find(' '));
    if (target != "/metrics" && !target.starts_with("/metrics?"))
      return respond(404, "text/plain", "not found: try /metrics\n");
    respond(200, "text/plain; version=0.0.4; charset=utf-8", owner_.render(), is_head);
  }

  void respond(int code, std::string_view type, std::string body, bool head_only = false) {
    std::string_view reason = code == 200   ? "OK"
                              : code == 404 ? "Not Found"
                              : code == 405 ? "Method Not Allowed"
                                            : "Request Header Fields Too Large";
    response_ = fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        code, reason, type, body.size());
    if (!head_only) response_ += body;
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(response_),
                      [self](const asio::error_code&, size_t) { self->close(); });
  }

  const HttpMetricsServer& owner_;
  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  std::shared_ptr<int64_t> sessions_;
  Counter& timeouts_;
  std::string request_;
  std::string response_;
};

void gauge(std::string& out, std::string_view name, std::string_view help, std::string_view type,
           int64_t value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

void render_cluster(std::string& out, const ClusterFigures& c) {
  auto n = [](uint64_t v) { return static_cast<int64_t>(v); };
  gauge(out, "tierkv_cluster_up", "1 while the lease is current and a map is held", "gauge",
        c.up ? 1 : 0);
  gauge(out, "tierkv_cluster_slot_map_version", "version of the slot map served", "gauge",
        n(c.map_version));
  gauge(out, "tierkv_cluster_slots_owned", "slots this node owns", "gauge", n(c.slots_owned));
  gauge(out, "tierkv_cluster_lease_renewals_total", "lease keep-alives etcd acknowledged",
        "counter", n(c.lease_renewals));
  gauge(out, "tierkv_cluster_etcd_round_trips_total", "requests to etcd", "counter",
        n(c.etcd_round_trips));
  gauge(out, "tierkv_cluster_etcd_failures_total", "requests to etcd that failed", "counter",
        n(c.etcd_failures));
  gauge(out, "tierkv_cluster_keys_purged_total", "old keys of regained slots removed", "counter",
        n(c.keys_purged));
  gauge(out, "tierkv_cluster_controller_leading", "1 while this node's controller leads", "gauge",
        std::string_view(c.controller) == "leading" ? 1 : 0);
  gauge(out, "tierkv_cluster_controller_maps_written_total", "slot maps this controller wrote",
        "counter", n(c.controller_maps_written));
  gauge(out, "tierkv_cluster_slots_migrating_out", "slots moving from this node", "gauge",
        n(c.slots_migrating_out));
  gauge(out, "tierkv_cluster_bytes_migrated_out_total", "value bytes moved to new owners",
        "counter", n(c.bytes_migrated_out));
  gauge(out, "tierkv_cluster_keys_migration_dropped_total",
        "keys a new owner refused for good (misses)", "counter", n(c.keys_migration_dropped));
}

}  // namespace

HttpMetricsServer::HttpMetricsServer(Server& server, asio::io_context& io)
    : server_(server),
      acceptor_(io),
      rejected_(server.context().metrics().counter(
          "tierkv_metrics_rejected_connections_total",
          "HTTP /metrics connections closed at once: metrics-max-clients reached")),
      timeouts_(server.context().metrics().counter(
          "tierkv_metrics_timeouts_total",
          "HTTP /metrics connections closed by metrics-timeout-ms")) {}

Status HttpMetricsServer::listen(const std::string& bind, uint16_t port) {
  try {
    asio::ip::tcp::endpoint ep(asio::ip::make_address(bind), port);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
  } catch (const std::system_error& e) {
    return Status::unavailable(
        fmt::format("cannot listen for metrics on {}:{}: {}", bind, port, e.what()));
  }
  accept();
  return Status::ok();
}

void HttpMetricsServer::stop() {
  asio::error_code ec;
  acceptor_.close(ec);
}

void HttpMetricsServer::accept() {
  acceptor_.async_accept([this](const asio::error_code& ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      on_accepted(std::move(socket));
    } else if (accept_error_pauses(ec)) {
      // Out of fds: pause instead of failing again at once, on and on.
      auto timer = std::make_shared<asio::steady_timer>(acceptor_.get_executor(),
                                                        std::chrono::milliseconds(100));
      timer->async_wait([this, timer](const asio::error_code& wait_ec) {
        if (!wait_ec && acceptor_.is_open()) accept();
      });
      return;
    }
    accept();
  });
}

void HttpMetricsServer::on_accepted(asio::ip::tcp::socket socket) {
  const ServerContext::Limits& l = server_.context().limits();
  if (*sessions_ >= l.metrics_max_clients.load(std::memory_order_relaxed)) {
    rejected_.add();
    asio::error_code ignored;
    socket.close(ignored);
    return;
  }
  auto timeout = std::chrono::milliseconds(l.metrics_timeout_ms.load(std::memory_order_relaxed));
  std::make_shared<HttpSession>(*this, std::move(socket), sessions_, timeouts_)->start(timeout);
}

std::string HttpMetricsServer::render() const {
  server_.loading_figures();  // brings the loading gauges up to date
  std::string out = server_.context().metrics().render_prometheus();
  MemoryFigures m = memory_figures(server_);
  gauge(out, "tierkv_memory_used_bytes", "bytes charged to the memory tier", "gauge", m.used_bytes);
  gauge(out, "tierkv_memory_budget_bytes", "memory tier budget", "gauge", m.budget_bytes);
  gauge(out, "tierkv_memory_leased_bytes", "bytes protected by prefetch leases", "gauge",
        m.leased_bytes);
  gauge(out, "tierkv_memory_index_bytes", "bytes of index tables", "gauge", m.index_bytes);
  gauge(out, "tierkv_memory_dirty_bytes", "bytes in memory not yet on flash", "gauge",
        m.dirty_bytes);
  gauge(out, "tierkv_memory_objects", "objects in memory", "gauge",
        static_cast<int64_t>(m.objects));
  gauge(out, "tierkv_memory_chunks", "chunks in memory", "gauge", static_cast<int64_t>(m.chunks));
  gauge(out, "tierkv_memory_evicted_objects_total", "objects evicted", "counter",
        static_cast<int64_t>(m.evicted_objects));
  gauge(out, "tierkv_memory_evicted_chunks_total", "chunks evicted", "counter",
        static_cast<int64_t>(m.evicted_chunks));
  gauge(out, "tierkv_memory_buffer_pool_idle_bytes", "chunk buffers kept mapped for reuse", "gauge",
        m.buffer_pool_idle_bytes);
  gauge(out, "tierkv_memory_buffer_pool_reused_total",
        "chunk and flash read buffers served by a kept buffer", "counter",
        static_cast<int64_t>(m.buffer_pool_reused));
  gauge(out, "tierkv_memory_buffer_pool_fresh_total",
        "chunk and flash read buffers the allocator provided", "counter",
        static_cast<int64_t>(m.buffer_pool_fresh));
  gauge(out, "tierkv_memory_expired_objects_total", "objects expired", "counter",
        static_cast<int64_t>(m.expired_objects));
  gauge(out, "tierkv_connected_clients", "connected clients", "gauge",
        static_cast<int64_t>(server_.client_count()));
  gauge(out, "tierkv_process_resident_memory_bytes", "resident set size", "gauge", m.rss_bytes);
  if (const std::optional<ClusterFigures> c = cluster_figures(server_)) render_cluster(out, *c);
  render_sizing_metrics(server_.context().store().sizing_curves(), out);
  return out;
}

}  // namespace tierkv::server
