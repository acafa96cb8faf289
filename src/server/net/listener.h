// Listener: the server's listening sockets (TCP and a Unix socket) and their
// accept loops, which run on one io_context (the first I/O thread's).
//
// Each socket is accepted onto the io_context of the I/O thread `pick`
// names and handed to the server's handler with that thread. An accept that
// fails for lack of descriptors or memory is tried again after 100 ms
// (logged once per episode): the pending connection waits in the backlog,
// and a full fd table does not spin a core. Every failure counts in
// `accept_errors`.
#pragma once

#include <asio.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/metrics.h"
#include "core/status.h"

namespace tierkv::server {

struct IoThread;

class Listener {
 public:
  using PickThread = std::function<IoThread&()>;
  // `tls`: accepted on the TLS port.
  using OnTcp = std::function<void(IoThread&, asio::ip::tcp::socket, bool tls)>;
  using OnUnix = std::function<void(IoThread&, asio::local::stream_protocol::socket)>;

  Listener(asio::io_context& io, Counter& accept_errors, PickThread pick, OnTcp on_tcp,
           OnUnix on_unix);
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Binds `bind`:`port` (port 0: no TCP listener), `bind`:`tls_port` (0:
  // none) and `unix_path` (empty: none). At least one must be asked for.
  Status listen(const std::string& bind, int port, const std::string& unix_path, int tls_port = 0);
  // Starts the accept loops.
  void start();
  // On the listeners' io_context: closes them, stops retries, and removes the
  // Unix socket's file.
  void close();

  uint16_t tcp_port() const { return tcp_port_; }
  uint16_t tls_port() const { return tls_port_; }
  const std::string& unix_path() const { return unix_path_; }
  bool has_tcp() const { return tcp_ != nullptr; }

 private:
  void accept_tcp();
  void accept_tls();
  void accept_tcp_on(asio::ip::tcp::acceptor& acceptor, bool tls, void (Listener::*again)());
  void accept_unix();
  // After a failed accept: at once, or after a pause when out of fds.
  void accept_again(const asio::error_code& ec, void (Listener::*accept)());

  asio::io_context& io_;
  Counter& accept_errors_;
  PickThread pick_;
  OnTcp on_tcp_;
  OnUnix on_unix_;
  std::unique_ptr<asio::ip::tcp::acceptor> tcp_;
  std::unique_ptr<asio::ip::tcp::acceptor> tls_;
  uint16_t tls_port_ = 0;
  std::unique_ptr<asio::local::stream_protocol::acceptor> unix_;
  uint16_t tcp_port_ = 0;
  std::string unix_path_;
  bool paused_logged_ = false;  // touched on io_ only
  std::atomic<bool> closed_{false};
};

}  // namespace tierkv::server
