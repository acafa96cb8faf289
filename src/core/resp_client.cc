#include "core/resp_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <utility>

namespace tierkv {

namespace {
constexpr int kMaxDepth = 8;
}  // namespace

const RespValue* RespValue::field(std::string_view name) const {
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i].text == name) return &items[i + 1];
  }
  return nullptr;
}

namespace {
void set_timeouts(int fd, std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // bounds connect() too
}
}  // namespace

Result<RespClient> RespClient::connect(const std::string& address,
                                       std::chrono::milliseconds timeout, ssl_ctx_st* tls) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Status::invalid_argument("server address must be host:port, not '" + address + "'");
  }
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Status::invalid_argument("cannot resolve " + address + ": " + gai_strerror(rc));
  }
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0) {
      set_timeouts(fd, timeout);
      // A request's last small piece (a value's tail, a pipeline's end)
      // goes at once: Nagle would hold it for the ACK of the bulk before
      // it, which the server may delay up to 40 ms.
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return Status::io_error("cannot connect to " + address + ": " + why);
  RespClient client(fd);
  if (tls == nullptr) return client;
  client.ssl_ = SSL_new(tls);
  if (client.ssl_ == nullptr || SSL_set_fd(client.ssl_, fd) != 1)
    return Status::io_error("TLS to " + address + ": cannot set up the connection");
  if (SSL_connect(client.ssl_) != 1) {
    char text[256] = "handshake failed";
    if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, text, sizeof(text));
    ERR_clear_error();
    return Status::io_error("TLS to " + address + ": " + text);
  }
  return client;
}

RespClient::RespClient(RespClient&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      ssl_(std::exchange(o.ssl_, nullptr)),
      gathered_(std::move(o.gathered_)),
      buffer_(std::move(o.buffer_)),
      pos_(o.pos_) {}

RespClient::~RespClient() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  if (fd_ >= 0) ::close(fd_);
}

void RespClient::append_command(std::string& out, const std::vector<std::string_view>& args) {
  out += "*" + std::to_string(args.size()) + "\r\n";
  for (std::string_view a : args) {
    out += "$" + std::to_string(a.size()) + "\r\n";
    out += a;
    out += "\r\n";
  }
}

Result<RespValue> RespClient::command(const std::vector<std::string>& args) {
  std::string out;
  append_command(out, std::vector<std::string_view>(args.begin(), args.end()));
  TIERKV_RETURN_IF_ERROR(send(out));
  return read_value(0);
}

void RespClient::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Status RespClient::send(std::string_view bytes) {
  return write_all(bytes.data(), bytes.size());
}

Status RespClient::write_all(const char* data, size_t size) {
  if (ssl_ != nullptr) {
    for (size_t sent = 0; sent < size;) {
      const int n =
          SSL_write(ssl_, data + sent, static_cast<int>(std::min<size_t>(size - sent, 1 << 30)));
      if (n <= 0) {
        ERR_clear_error();
        return Status::io_error("connection lost (TLS write failed or timed out)");
      }
      sent += static_cast<size_t>(n);
    }
    return Status::ok();
  }
  const std::string_view bytes(data, size);
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return Status::io_error("timed out sending to the server");
    if (n <= 0) return Status::io_error(std::string("connection lost: ") + std::strerror(errno));
    sent += static_cast<size_t>(n);
  }
  return Status::ok();
}

Status RespClient::send_tls(std::span<const std::string_view> pieces) {
  constexpr size_t kRecord = 16 * 1024;
  std::string& gathered = gathered_;
  gathered.clear();
  for (std::string_view p : pieces) {
    if (p.size() >= kRecord) {
      if (!gathered.empty()) TIERKV_RETURN_IF_ERROR(write_all(gathered.data(), gathered.size()));
      gathered.clear();
      TIERKV_RETURN_IF_ERROR(write_all(p.data(), p.size()));
      continue;
    }
    gathered.append(p);
    if (gathered.size() >= kRecord) {
      TIERKV_RETURN_IF_ERROR(write_all(gathered.data(), gathered.size()));
      gathered.clear();
    }
  }
  return gathered.empty() ? Status::ok() : write_all(gathered.data(), gathered.size());
}

Status RespClient::send(std::span<const std::string_view> pieces) {
  if (ssl_ != nullptr) return send_tls(pieces);
  constexpr size_t kMaxIov = 64;
  iovec iov[kMaxIov];
  size_t next = 0, skip = 0;  // the first piece not fully sent, and its bytes already sent
  while (next < pieces.size()) {
    size_t count = 0;
    for (size_t i = next; i < pieces.size() && count < kMaxIov; ++i) {
      const size_t from = i == next ? skip : 0;
      if (pieces[i].size() == from) continue;
      iov[count++] = {const_cast<char*>(pieces[i].data() + from), pieces[i].size() - from};
    }
    if (count == 0) break;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return Status::io_error("timed out sending to the server");
    if (n <= 0) return Status::io_error(std::string("connection lost: ") + std::strerror(errno));
    for (auto left = static_cast<size_t>(n); next < pieces.size();) {
      const size_t rest = pieces[next].size() - skip;
      if (left < rest) {
        skip += left;
        break;
      }
      left -= rest;
      ++next;
      skip = 0;
    }
  }
  return Status::ok();
}

Status RespClient::fill() {
  if (pos_ > 0) {
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
  char chunk[16384];
  if (ssl_ != nullptr) {
    const int n = SSL_read(ssl_, chunk, sizeof(chunk));
    if (n <= 0) {
      const int why = SSL_get_error(ssl_, n);
      ERR_clear_error();
      return Status::io_error(why == SSL_ERROR_ZERO_RETURN
                                  ? "connection closed by the server"
                                  : "connection lost or timed out (TLS read)");
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return Status::ok();
  }
  for (;;) {
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return Status::io_error("connection closed by the server");
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return Status::io_error("timed out waiting for the server");
    if (n < 0) return Status::io_error(std::string("connection lost: ") + std::strerror(errno));
    buffer_.append(chunk, static_cast<size_t>(n));
    return Status::ok();
  }
}

Result<std::string> RespClient::line() {
  for (;;) {
    const size_t end = buffer_.find("\r\n", pos_);
    if (end != std::string::npos) {
      std::string out = buffer_.substr(pos_, end - pos_);
      pos_ = end + 2;
      return out;
    }
    TIERKV_RETURN_IF_ERROR(fill());
  }
}

Result<std::string> RespClient::exact(size_t n) {
  while (buffer_.size() - pos_ < n + 2) TIERKV_RETURN_IF_ERROR(fill());
  std::string out = buffer_.substr(pos_, n);
  pos_ += n + 2;
  return out;
}

Result<RespValue> RespClient::read_value(int depth) {
  if (depth > kMaxDepth) return Status::corruption("reply nested too deeply");
  Result<std::string> head = line();
  if (!head) return head.status();
  if (head->empty()) return Status::corruption("empty reply line");
  const char kind = (*head)[0];
  const std::string rest = head->substr(1);
  RespValue v;
  int64_t n = 0;
  const bool numeric = std::from_chars(rest.data(), rest.data() + rest.size(), n).ec == std::errc();
  switch (kind) {
    case '+':
      v.type = RespValue::Type::kSimple;
      v.text = rest;
      return v;
    case '-':
      v.type = RespValue::Type::kError;
      v.text = rest;
      return v;
    case ':':
      if (!numeric) return Status::corruption("bad integer reply");
      v.type = RespValue::Type::kInteger;
      v.integer = n;
      return v;
    case '$': {
      if (!numeric) return Status::corruption("bad bulk length");
      if (n < 0) return v;  // null
      Result<std::string> body = exact(static_cast<size_t>(n));
      if (!body) return body.status();
      v.type = RespValue::Type::kBulk;
      v.text = std::move(*body);
      return v;
    }
    case '*': {
      if (!numeric) return Status::corruption("bad array length");
      if (n < 0) return v;
      v.type = RespValue::Type::kArray;
      for (int64_t i = 0; i < n; ++i) {
        Result<RespValue> item = read_value(depth + 1);
        if (!item) return item.status();
        v.items.push_back(std::move(*item));
      }
      return v;
    }
    default:
      return Status::corruption(std::string("unexpected reply type '") + kind + "'");
  }
}

}  // namespace tierkv
