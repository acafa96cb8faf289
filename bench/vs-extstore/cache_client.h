// GET/SET over one blocking TCP connection, in either the Redis protocol
// (RESP2) or memcached's text protocol, so one load generator can drive both
// tierkv and memcached and any difference in results comes from the server.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tierkv::bench {

enum class Protocol { kResp, kMemcache };

// A blocking, buffered TCP connection. Errors are kIOError and mean the
// connection is no longer usable.
class BlockingSocket {
 public:
  static Result<std::unique_ptr<BlockingSocket>> connect(const std::string& host, int port);
  ~BlockingSocket();
  BlockingSocket(const BlockingSocket&) = delete;
  BlockingSocket& operator=(const BlockingSocket&) = delete;

  // Sends every byte of the pieces, in order (one writev when it can).
  Status write_all(const std::string_view* pieces, size_t count);
  // A line without its "\r\n"; valid until the next read.
  Result<std::string_view> read_line();
  // Exactly n bytes into dst (dst may be null to discard them).
  Status read_exact(char* dst, size_t n);

 private:
  explicit BlockingSocket(int fd) : fd_(fd) {}
  Status fill();  // reads more bytes into the buffer

  int fd_;
  std::string buffer_ = std::string(64 << 10, '\0');
  size_t begin_ = 0;  // first unread byte in buffer_
  size_t end_ = 0;    // one past the last byte read
};

// A SET's value as two slices (a per-value header and a shared body), so a
// 512 KiB value goes to the socket without being copied.
struct ValueParts {
  std::string_view head;
  std::string_view body;
  size_t size() const { return head.size() + body.size(); }
};

class CacheClient {
 public:
  virtual ~CacheClient() = default;
  // true and the value in *out on a hit; false on a miss. A server error
  // reply is kUnavailable; a broken connection is kIOError.
  virtual Result<bool> get(std::string_view key, std::string* out) = 0;
  // OK when stored. The server refusing (out of memory, too large) is
  // kUnavailable with the server's message; a broken connection is kIOError.
  virtual Status set(std::string_view key, const ValueParts& value) = 0;
};

Result<std::unique_ptr<CacheClient>> connect_client(Protocol protocol, const std::string& host,
                                                    int port);

}  // namespace tierkv::bench
