#include "cache_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

namespace tierkv::bench {
namespace {

Status errno_status(std::string_view what) {
  return Status::io_error(std::string(what) + ": " + std::strerror(errno));
}

Result<int64_t> parse_int(std::string_view text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return Status::io_error("bad number in reply: '" + std::string(text) + "'");
  }
  return value;
}

}  // namespace

Result<std::unique_ptr<BlockingSocket>> BlockingSocket::connect(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return Status::io_error("resolve " + host + ": " + gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, freeaddrinfo);
  Status last = Status::io_error("no address for " + host);
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = errno_status("socket");
      continue;
    }
    std::unique_ptr<BlockingSocket> sock(new BlockingSocket(fd));
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      last = errno_status("connect " + host + ":" + service);
      continue;
    }
    // Requests are one writev each; Nagle would only add delay.
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return sock;
  }
  return last;
}

BlockingSocket::~BlockingSocket() {
  ::close(fd_);
}

Status BlockingSocket::write_all(const std::string_view* pieces, size_t count) {
  std::vector<iovec> iov;
  iov.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (!pieces[i].empty()) {
      iov.push_back({const_cast<char*>(pieces[i].data()), pieces[i].size()});
    }
  }
  size_t next = 0;
  while (next < iov.size()) {
    msghdr msg{};
    msg.msg_iov = &iov[next];
    msg.msg_iovlen = iov.size() - next;
    ssize_t sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return errno_status("send");
    }
    auto left = static_cast<size_t>(sent);
    while (next < iov.size() && left >= iov[next].iov_len) {
      left -= iov[next].iov_len;
      ++next;
    }
    if (left > 0) {
      iov[next].iov_base = static_cast<char*>(iov[next].iov_base) + left;
      iov[next].iov_len -= left;
    }
  }
  return Status::ok();
}

Status BlockingSocket::fill() {
  if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (end_ == buffer_.size()) {
    if (begin_ == 0) return Status::io_error("reply line longer than the read buffer");
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  for (;;) {
    ssize_t got = ::recv(fd_, buffer_.data() + end_, buffer_.size() - end_, 0);
    if (got > 0) {
      end_ += static_cast<size_t>(got);
      return Status::ok();
    }
    if (got == 0) return Status::io_error("connection closed by the server");
    if (errno != EINTR) return errno_status("recv");
  }
}

Result<std::string_view> BlockingSocket::read_line() {
  size_t scanned = begin_;
  for (;;) {
    const void* nl = std::memchr(buffer_.data() + scanned, '\n', end_ - scanned);
    if (nl != nullptr) {
      size_t stop = static_cast<size_t>(static_cast<const char*>(nl) - buffer_.data());
      std::string_view line(buffer_.data() + begin_, stop - begin_);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      begin_ = stop + 1;
      return line;
    }
    size_t offset = scanned - begin_;
    TIERKV_RETURN_IF_ERROR(fill());
    scanned = begin_ + offset;
  }
}

Status BlockingSocket::read_exact(char* dst, size_t n) {
  while (n > 0) {
    if (begin_ == end_ && dst != nullptr && n >= buffer_.size()) {
      // Large remainder: read straight into the caller's memory.
      ssize_t got = ::recv(fd_, dst, n, 0);
      if (got == 0) return Status::io_error("connection closed by the server");
      if (got < 0) {
        if (errno == EINTR) continue;
        return errno_status("recv");
      }
      dst += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (begin_ == end_) TIERKV_RETURN_IF_ERROR(fill());
    size_t take = std::min(n, end_ - begin_);
    if (dst != nullptr) {
      std::memcpy(dst, buffer_.data() + begin_, take);
      dst += take;
    }
    begin_ += take;
    n -= take;
  }
  return Status::ok();
}

namespace {

class RespClient final : public CacheClient {
 public:
  explicit RespClient(std::unique_ptr<BlockingSocket> sock) : sock_(std::move(sock)) {}

  Result<bool> get(std::string_view key, std::string* out) override {
    head_ = "*2\r\n$3\r\nGET\r\n$" + std::to_string(key.size()) + "\r\n";
    std::string_view pieces[] = {head_, key, "\r\n"};
    TIERKV_RETURN_IF_ERROR(sock_->write_all(pieces, std::size(pieces)));
    Result<std::string_view> line = sock_->read_line();
    if (!line) return line.status();
    if (line->starts_with('-')) return Status::unavailable(std::string(*line));
    if (!line->starts_with('$')) return unexpected(*line);
    Result<int64_t> len = parse_int(line->substr(1));
    if (!len) return len.status();
    if (*len < 0) return false;
    out->resize(static_cast<size_t>(*len));
    TIERKV_RETURN_IF_ERROR(sock_->read_exact(out->data(), out->size()));
    TIERKV_RETURN_IF_ERROR(sock_->read_exact(nullptr, 2));  // "\r\n"
    return true;
  }

  Status set(std::string_view key, const ValueParts& value) override {
    head_ = "*3\r\n$3\r\nSET\r\n$" + std::to_string(key.size()) + "\r\n";
    value_len_ = "\r\n$" + std::to_string(value.size()) + "\r\n";
    std::string_view pieces[] = {head_, key, value_len_, value.head, value.body, "\r\n"};
    TIERKV_RETURN_IF_ERROR(sock_->write_all(pieces, std::size(pieces)));
    Result<std::string_view> line = sock_->read_line();
    if (!line) return line.status();
    if (*line == "+OK") return Status::ok();
    if (line->starts_with('-')) return Status::unavailable(std::string(*line));
    return unexpected(*line);
  }

 private:
  static Status unexpected(std::string_view line) {
    return Status::io_error("unexpected RESP reply: '" + std::string(line.substr(0, 80)) + "'");
  }

  std::unique_ptr<BlockingSocket> sock_;
  std::string head_;
  std::string value_len_;
};

class MemcacheClient final : public CacheClient {
 public:
  explicit MemcacheClient(std::unique_ptr<BlockingSocket> sock) : sock_(std::move(sock)) {}

  Result<bool> get(std::string_view key, std::string* out) override {
    std::string_view pieces[] = {"get ", key, "\r\n"};
    TIERKV_RETURN_IF_ERROR(sock_->write_all(pieces, std::size(pieces)));
    Result<std::string_view> line = sock_->read_line();
    if (!line) return line.status();
    if (*line == "END") return false;
    if (is_error(*line)) return Status::unavailable(std::string(*line));
    // "VALUE <key> <flags> <bytes>"
    if (!line->starts_with("VALUE ")) return unexpected(*line);
    size_t last_space = line->rfind(' ');
    Result<int64_t> len = parse_int(line->substr(last_space + 1));
    if (!len) return len.status();
    out->resize(static_cast<size_t>(*len));
    TIERKV_RETURN_IF_ERROR(sock_->read_exact(out->data(), out->size()));
    TIERKV_RETURN_IF_ERROR(sock_->read_exact(nullptr, 2));  // "\r\n"
    Result<std::string_view> end = sock_->read_line();
    if (!end) return end.status();
    if (*end != "END") return unexpected(*end);
    return true;
  }

  Status set(std::string_view key, const ValueParts& value) override {
    tail_ = " 0 0 " + std::to_string(value.size()) + "\r\n";
    std::string_view pieces[] = {"set ", key, tail_, value.head, value.body, "\r\n"};
    TIERKV_RETURN_IF_ERROR(sock_->write_all(pieces, std::size(pieces)));
    Result<std::string_view> line = sock_->read_line();
    if (!line) return line.status();
    if (*line == "STORED") return Status::ok();
    if (is_error(*line) || *line == "NOT_STORED") return Status::unavailable(std::string(*line));
    return unexpected(*line);
  }

 private:
  static bool is_error(std::string_view line) {
    return line.starts_with("SERVER_ERROR") || line.starts_with("CLIENT_ERROR") || line == "ERROR";
  }
  static Status unexpected(std::string_view line) {
    return Status::io_error("unexpected memcached reply: '" + std::string(line.substr(0, 80)) +
                            "'");
  }

  std::unique_ptr<BlockingSocket> sock_;
  std::string tail_;
};

}  // namespace

Result<std::unique_ptr<CacheClient>> connect_client(Protocol protocol, const std::string& host,
                                                    int port) {
  Result<std::unique_ptr<BlockingSocket>> sock = BlockingSocket::connect(host, port);
  if (!sock) return sock.status();
  if (protocol == Protocol::kResp) {
    return std::unique_ptr<CacheClient>(new RespClient(std::move(*sock)));
  }
  return std::unique_ptr<CacheClient>(new MemcacheClient(std::move(*sock)));
}

}  // namespace tierkv::bench
