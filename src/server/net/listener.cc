#include "server/net/listener.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>

#include "server/net/hardening.h"
#include "server/net/server.h"

namespace tierkv::server {

Listener::Listener(asio::io_context& io, Counter& accept_errors, PickThread pick, OnTcp on_tcp,
                   OnUnix on_unix)
    : io_(io),
      accept_errors_(accept_errors),
      pick_(std::move(pick)),
      on_tcp_(std::move(on_tcp)),
      on_unix_(std::move(on_unix)) {}

namespace {

std::unique_ptr<asio::ip::tcp::acceptor> listen_tcp(asio::io_context& io, const std::string& bind,
                                                    int port) {
  asio::ip::tcp::endpoint ep(asio::ip::make_address(bind), static_cast<uint16_t>(port));
  auto acceptor = std::make_unique<asio::ip::tcp::acceptor>(io);
  acceptor->open(ep.protocol());
  acceptor->set_option(asio::socket_base::reuse_address(true));
  acceptor->bind(ep);
  acceptor->listen(asio::socket_base::max_listen_connections);
  return acceptor;
}

}  // namespace

Status Listener::listen(const std::string& bind, int port, const std::string& unix_path,
                        int tls_port) {
  try {
    if (port > 0) {
      tcp_ = listen_tcp(io_, bind, port);
      tcp_port_ = tcp_->local_endpoint().port();
    }
    if (tls_port > 0) {
      tls_ = listen_tcp(io_, bind, tls_port);
      tls_port_ = tls_->local_endpoint().port();
    }
    if (!unix_path.empty()) {
      unix_path_ = unix_path;
      std::remove(unix_path_.c_str());
      unix_ = std::make_unique<asio::local::stream_protocol::acceptor>(
          io_, asio::local::stream_protocol::endpoint(unix_path_));
    }
  } catch (const std::system_error& e) {
    return Status::unavailable(fmt::format("cannot listen: {}", e.what()));
  }
  if (!tcp_ && !unix_ && !tls_)
    return Status::invalid_argument(
        "nothing to listen on: port and tls-port are 0 and no unixsocket");
  return Status::ok();
}

void Listener::start() {
  if (tcp_) accept_tcp();
  if (tls_) accept_tls();
  if (unix_) accept_unix();
}

void Listener::close() {
  closed_.store(true, std::memory_order_release);
  asio::error_code ec;
  if (tcp_) tcp_->close(ec);
  if (tls_) tls_->close(ec);
  if (unix_) unix_->close(ec);
  if (!unix_path_.empty()) std::remove(unix_path_.c_str());
}

void Listener::accept_tcp() {
  accept_tcp_on(*tcp_, false, &Listener::accept_tcp);
}

void Listener::accept_tls() {
  accept_tcp_on(*tls_, true, &Listener::accept_tls);
}

void Listener::accept_tcp_on(asio::ip::tcp::acceptor& acceptor, bool tls,
                             void (Listener::*again)()) {
  IoThread& t = pick_();
  acceptor.async_accept(
      t.io, [this, &t, tls, again](const asio::error_code& ec, asio::ip::tcp::socket socket) {
        if (ec == asio::error::operation_aborted) return;
        if (ec) return accept_again(ec, again);
        paused_logged_ = false;
        on_tcp_(t, std::move(socket), tls);
        (this->*again)();
      });
}

void Listener::accept_unix() {
  IoThread& t = pick_();
  unix_->async_accept(
      t.io, [this, &t](const asio::error_code& ec, asio::local::stream_protocol::socket socket) {
        if (ec == asio::error::operation_aborted) return;
        if (ec) return accept_again(ec, &Listener::accept_unix);
        paused_logged_ = false;
        on_unix_(t, std::move(socket));
        accept_unix();
      });
}

void Listener::accept_again(const asio::error_code& ec, void (Listener::*accept)()) {
  accept_errors_.add();
  if (!accept_error_pauses(ec)) {
    spdlog::warn("accept failed: {}", ec.message());
    return (this->*accept)();
  }
  if (!paused_logged_)
    spdlog::warn("accept failed: {}; pausing accepts for 100 ms at a time until it succeeds",
                 ec.message());
  paused_logged_ = true;
  auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
  timer->async_wait([this, timer, accept](const asio::error_code& wait_ec) {
    if (wait_ec || closed_.load(std::memory_order_acquire)) return;
    (this->*accept)();
  });
}

}  // namespace tierkv::server
