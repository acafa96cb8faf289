// A blocking RESP client over a Unix socket, for tests that run the whole
// server in-process.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>

namespace tierkv::server::testing {

class UnixClient {
 public:
  explicit UnixClient(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    timeval tv{.tv_sec = 10, .tv_usec = 0};  // a hung reply fails the test, not CI
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~UnixClient() { ::close(fd_); }
  UnixClient(const UnixClient&) = delete;
  UnixClient& operator=(const UnixClient&) = delete;
  bool connected() const { return connected_; }

  bool send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads until `n` bytes arrived, or EOF/error.
  std::string read_exactly(size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      ssize_t r = read_some(out.data() + got, n - got);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    out.resize(got);
    return out;
  }

  // One reply: a line, or a bulk string with its payload. On EOF or an
  // error, a text that no reply looks like ("EOF:..." / "errno ...").
  std::string read_reply() {
    std::string head;
    char c;
    ssize_t n;
    while ((n = read_some(&c, 1)) == 1) {
      head.push_back(c);
      if (head.ends_with("\r\n")) break;
    }
    if (n == 0) return "EOF:" + head;
    if (n < 0) return "errno " + std::string(std::strerror(errno)) + ":" + head;
    if (head.size() > 1 && head[0] == '$' && head != "$-1\r\n")
      return head + read_exactly(std::stoul(head.substr(1)) + 2);
    return head;
  }

 private:
  // With a flash tier in the process, io_uring task work can interrupt a
  // blocking read in any thread.
  ssize_t read_some(char* p, size_t n) {
    for (;;) {
      ssize_t r = ::read(fd_, p, n);
      if (r >= 0 || errno != EINTR) return r;
    }
  }

  int fd_ = -1;
  bool connected_ = false;
};

// A command in RESP's multibulk form.
inline std::string command(std::initializer_list<std::string_view> args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (std::string_view a : args) {
    out += "$" + std::to_string(a.size()) + "\r\n";
    out.append(a);
    out += "\r\n";
  }
  return out;
}

}  // namespace tierkv::server::testing
