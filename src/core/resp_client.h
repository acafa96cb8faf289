// RespClient: a blocking Redis-protocol client (the tierkv CLI, and a
// cluster node moving keys to another). Replies come back as a tree of
// RespValue; an error reply is a value of type kError, a broken connection,
// a timeout or a reply that does not parse is a Status, after which the
// client is unusable (the stream may be cut mid-reply).
//
// With a TLS context, the connection speaks TLS (OpenSSL over the same
// blocking socket): the server's certificate must chain to the context's
// CAs, as Redis checks a cluster peer's. Sends of many small pieces are
// gathered into records of up to 16 KiB; a large piece goes to SSL_write
// where it lies.
//
// command() is one round trip. A caller that pipelines, or streams a value
// too large to hold, writes the request itself with send() (append_command()
// encodes one) and reads each reply with read_reply().
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX
struct ssl_st;      // and SSL

namespace tierkv {

struct RespValue {
  enum class Type : uint8_t { kSimple, kError, kInteger, kBulk, kNull, kArray };
  Type type = Type::kNull;
  std::string text;  // simple, error, bulk
  int64_t integer = 0;
  std::vector<RespValue> items;  // array (RESP2 maps are flat arrays)

  // For a flat array of name/value pairs (TIER.JOB): the value of `name`.
  const RespValue* field(std::string_view name) const;
};

class RespClient {
 public:
  // "host:port" (host may be a name or an address). `timeout` bounds the
  // connect and every send or receive that waits (zero: no bound).
  static Result<RespClient> connect(const std::string& address,
                                    std::chrono::milliseconds timeout = {},
                                    ssl_ctx_st* tls = nullptr);
  RespClient(RespClient&& o) noexcept;
  RespClient& operator=(RespClient&&) = delete;
  ~RespClient();

  Result<RespValue> command(const std::vector<std::string>& args);
  Status send(std::string_view bytes);
  // Sends `pieces` in order as one stream (sendmsg over them, no copy into
  // one buffer): a value's chunks go out where they lie.
  Status send(std::span<const std::string_view> pieces);
  // Ends a send or receive blocked in another thread (it fails at once);
  // the client is unusable afterwards.
  void shutdown();
  Result<RespValue> read_reply() { return read_value(0); }

  // Appends the RESP encoding of `args` to `out`.
  static void append_command(std::string& out, const std::vector<std::string_view>& args);

 private:
  explicit RespClient(int fd) : fd_(fd) {}
  // Writes `bytes` whole, plain or over TLS.
  Status write_all(const char* data, size_t size);
  Status send_tls(std::span<const std::string_view> pieces);
  Status fill();
  Result<std::string> line();
  Result<std::string> exact(size_t n);
  Result<RespValue> read_value(int depth);

  int fd_ = -1;
  ssl_st* ssl_ = nullptr;  // owned; null: plain
  std::string gathered_;   // small pieces of a TLS send, reused
  std::string buffer_;
  size_t pos_ = 0;
};

}  // namespace tierkv
