// HttpMetricsServer: GET /metrics over HTTP/1.1 in the Prometheus text format.
//
// Tiny on purpose: one request per connection (Connection: close), requests
// capped at 8 KiB, served on the server's first I/O thread. The body is the
// metrics registry plus the memory-tier gauges, the same figures INFO shows.
#pragma once

#include <asio.hpp>

#include <cstdint>
#include <string>

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

  Server& server_;
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
};

}  // namespace tierkv::server
