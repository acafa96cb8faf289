// RespClient: a blocking Redis-protocol client for the tierkv CLI (one
// connection, one command at a time). Replies come back as a tree of
// RespValue; an error reply is a value of type kError, a broken connection
// or a reply that does not parse is a Status.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace tierkv::cli {

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
  // "host:port" (host may be a name or an address).
  static Result<RespClient> connect(const std::string& address);
  RespClient(RespClient&& o) noexcept;
  RespClient& operator=(RespClient&&) = delete;
  ~RespClient();

  Result<RespValue> command(const std::vector<std::string>& args);

 private:
  explicit RespClient(int fd) : fd_(fd) {}
  Status fill();
  Result<std::string> line();
  Result<std::string> exact(size_t n);
  Result<RespValue> read_value(int depth);

  int fd_ = -1;
  std::string buffer_;
  size_t pos_ = 0;
};

}  // namespace tierkv::cli
