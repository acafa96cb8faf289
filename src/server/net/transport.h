// Transport: a client connection's byte stream, plain or TLS (OpenSSL 3
// through asio::ssl::stream). Connection reads and writes through it and
// never sees which.
//
// Contract: one read and one write may be in flight at once, from the
// connection's I/O thread only (asio's ssl::stream is full duplex on one
// strand). A TLS write takes the buffers as they lie: a large one (a
// value's chunk) goes to SSL_write as is, with no copy; small leading ones
// are gathered into one record of at most 16 KiB first, so that a reply
// of many small pieces is not one record (and one syscall) per piece.
// Plain writes are one gathered sendmsg, as before.
#pragma once

#include <asio.hpp>
#include <asio/ssl.hpp>

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tierkv::server {

// A buffer sequence that refers to a reused vector of buffers, so that an
// asynchronous write does not copy the vector.
struct BufferListRef {
  using value_type = asio::const_buffer;
  using const_iterator = std::vector<asio::const_buffer>::const_iterator;
  const std::vector<asio::const_buffer>* v;
  const_iterator begin() const { return v->begin(); }
  const_iterator end() const { return v->end(); }
};

class Transport {
 public:
  using Socket = asio::generic::stream_protocol::socket;
  using TlsStream = asio::ssl::stream<Socket>;

  explicit Transport(Socket socket) : stream_(std::move(socket)) {}
  // TLS over `socket`; the handshake is async_handshake()'s.
  Transport(Socket socket, std::shared_ptr<asio::ssl::context> context)
      : context_(std::move(context)),
        stream_(std::make_unique<TlsStream>(std::move(socket), *context_)) {}

  bool tls() const { return std::holds_alternative<std::unique_ptr<TlsStream>>(stream_); }
  Socket& socket() {
    if (auto* s = std::get_if<Socket>(&stream_)) return *s;
    return std::get<std::unique_ptr<TlsStream>>(stream_)->next_layer();
  }
  int native_handle() { return static_cast<int>(socket().native_handle()); }

  // TLS: the server side of the handshake. Plain: `handler` runs at once
  // (posted), with no error.
  template <typename Handler>
  void async_handshake(Handler&& handler) {
    if (auto* t = std::get_if<std::unique_ptr<TlsStream>>(&stream_)) {
      (*t)->async_handshake(asio::ssl::stream_base::server, std::forward<Handler>(handler));
    } else {
      asio::post(socket().get_executor(),
                 [h = std::forward<Handler>(handler)]() mutable { h(asio::error_code()); });
    }
  }

  template <typename Handler>
  void async_read_some(asio::mutable_buffer buffer, Handler&& handler) {
    if (auto* t = std::get_if<std::unique_ptr<TlsStream>>(&stream_)) {
      (*t)->async_read_some(buffer, std::forward<Handler>(handler));
    } else {
      socket().async_read_some(buffer, std::forward<Handler>(handler));
    }
  }

  // Writes a prefix of `buffers` (which must stay valid until `handler`).
  template <typename Handler>
  void async_write_some(const std::vector<asio::const_buffer>& buffers, Handler&& handler) {
    if (auto* t = std::get_if<std::unique_ptr<TlsStream>>(&stream_)) {
      (*t)->async_write_some(tls_record(buffers), std::forward<Handler>(handler));
    } else {
      socket().async_write_some(BufferListRef{&buffers}, std::forward<Handler>(handler));
    }
  }

  // Best effort and blocking, before a plain connection starts (a
  // refusal). A TLS peer has had no handshake yet: it gets nothing.
  void write_now(std::string_view bytes) {
    if (tls()) return;
    asio::error_code ec;
    socket().write_some(asio::buffer(bytes.data(), bytes.size()), ec);
  }

  void close() {
    asio::error_code ec;
    socket().shutdown(asio::socket_base::shutdown_both, ec);
    socket().close(ec);
  }

 private:
  // What one TLS write sends: the first buffer if it is large, else the
  // leading buffers gathered into scratch_, up to one record's worth.
  asio::const_buffer tls_record(const std::vector<asio::const_buffer>& buffers);

  std::shared_ptr<asio::ssl::context> context_;  // outlives the stream
  std::variant<Socket, std::unique_ptr<TlsStream>> stream_;
  std::string scratch_;
};

}  // namespace tierkv::server
