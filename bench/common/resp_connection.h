// A blocking RESP connection for the benchmark drivers: commands go out
// with writev (a large value is never joined into one buffer), replies are
// read through one reused receive buffer, and a bulk reply's bytes are
// dropped as they arrive (only its length and first 8 bytes are kept), so a
// driver measures the server and the wire, not its own copies. Failures
// throw: a benchmark connection that breaks ends the run.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tierkv::bench {

// One blocking RESP connection with a receive buffer. Failures throw: a
// benchmark connection that breaks ends the run.
class Connection {
 public:
  explicit Connection(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd_);
      throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port));
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    buffer_.resize(256 << 10);
  }
  ~Connection() { ::close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends the pieces as they are, without joining them.
  void send(std::initializer_list<std::string_view> pieces) {
    send(std::vector<std::string_view>(pieces));
  }
  void send(const std::vector<std::string_view>& pieces) {
    std::vector<iovec> iov;
    for (std::string_view p : pieces) iov.push_back({const_cast<char*>(p.data()), p.size()});
    size_t first = 0;
    while (first < iov.size()) {
      ssize_t n = ::writev(fd_, iov.data() + first, static_cast<int>(iov.size() - first));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("send failed");
      auto left = static_cast<size_t>(n);
      while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
      if (first < iov.size()) {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
      }
    }
  }

  // Reads one reply. A bulk string's length goes to *bulk_length (-1 for
  // nil, other replies) and its first 8 bytes to *head; the rest is dropped.
  // Returns the reply's first line.
  std::string read_reply(int64_t* bulk_length, uint64_t* head) {
    std::string line = read_line();
    *bulk_length = -1;
    *head = 0;
    if (line.empty() || line[0] != '$') return line;
    const int64_t len = std::stoll(line.substr(1));
    *bulk_length = len;
    if (len < 0) return line;
    uint64_t left = static_cast<uint64_t>(len) + 2, seen = 0;
    unsigned char first[8] = {};
    while (left > 0) {
      if (begin_ == end_) fill();
      const uint64_t n = std::min<uint64_t>(left, end_ - begin_);
      if (seen < 8) std::memcpy(first + seen, &buffer_[begin_], std::min<uint64_t>(n, 8 - seen));
      seen += n;
      begin_ += n;
      left -= n;
    }
    std::memcpy(head, first, sizeof(*head));
    return line;
  }

 private:
  std::string read_line() {
    std::string line;
    for (;;) {
      if (begin_ == end_) fill();
      const char* start = &buffer_[begin_];
      const void* nl = std::memchr(start, '\n', end_ - begin_);
      const size_t n = nl ? static_cast<const char*>(nl) - start + 1 : end_ - begin_;
      line.append(start, n);
      begin_ += n;
      if (nl) break;
    }
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    return line;
  }
  void fill() {
    begin_ = 0;
    for (;;) {
      ssize_t n = ::recv(fd_, buffer_.data(), buffer_.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("connection closed by the server");
      end_ = static_cast<size_t>(n);
      return;
    }
  }

  int fd_ = -1;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;
};

inline std::string bulk_header(size_t length) {
  return "$" + std::to_string(length) + "\r\n";
}

inline void send_set(Connection& c, std::string_view key, std::string_view value) {
  const std::string key_head = bulk_header(key.size());
  const std::string value_head = bulk_header(value.size());
  c.send({"*3\r\n$3\r\nSET\r\n", key_head, key, "\r\n", value_head, value, "\r\n"});
}

inline void send_get(Connection& c, std::string_view key) {
  const std::string key_head = bulk_header(key.size());
  c.send({"*2\r\n$3\r\nGET\r\n", key_head, key, "\r\n"});
}

// Encodes one command (a RESP array of bulk strings).
inline std::string encode_command(const std::vector<std::string_view>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (std::string_view a : args) {
    out += bulk_header(a.size());
    out.append(a);
    out += "\r\n";
  }
  return out;
}

}  // namespace tierkv::bench
