// HttpMetricsServer: GET /metrics over HTTP/1.1 in the Prometheus text format.
//
// Tiny on purpose: one request per connection (Connection: close), requests
// capped at 8 KiB, served on the server's first I/O thread. The body is the
// metrics registry plus the memory-tier gauges, the same figures INFO shows.
// Hardened: a connection that has not been answered within
// metrics-timeout-ms is closed, and past metrics-max-clients connections at
// once a new one is closed at once.
#pragma once

#include <asio.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "core/metrics.h"
#include "core/status.h"

namespace tierkv::server {

class Server;

class HttpMetricsServer {
 public:
  HttpMetricsServer(Server& server, asio::io_context& io);
  Status listen(const std::string& bind, uint16_t port);
  void stop();
  uint16_t port() const { return port_; }

  // The /metrics body.
  std::string render() const;

 private:
  void accept();
  void on_accepted(asio::ip::tcp::socket socket);

  Server& server_;
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  // Sessions open now. Shared with them: a session may outlive this object
  // when the io_context drops its pending handlers at shutdown.
  std::shared_ptr<int64_t> sessions_ = std::make_shared<int64_t>(0);
  Counter& rejected_;
  Counter& timeouts_;
};

}  // namespace tierkv::server
