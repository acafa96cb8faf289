// Status and Result<T>: how tierkv reports expected failures.
//
// Codes are chosen so that each one maps onto one Redis error prefix
// (see error_prefix()); the server turns a Status into a "-PREFIX msg" reply
// without string matching.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace tierkv {

enum class StatusCode : uint8_t {
  kOk = 0,
  kNotFound,         // key or object absent
  kInvalidArgument,  // caller error: syntax, range, type of a value
  kOutOfRange,       // offset/length outside the object
  kTooLarge,         // a configured limit (key, object, bulk) exceeded
  kOutOfMemory,      // the memory budget cannot hold the request
  kBusy,             // backpressure: retry later
  kExists,           // a write condition (NX) was not met
  kConflict,         // a version check failed (concurrent writer)
  kWrongType,        // value does not hold what the command needs
  kIOError,          // device or file failure
  kCorruption,       // checksum mismatch, torn record
  kUnavailable,      // subsystem disabled or shutting down
  kInternal,         // a bug: invariant broken
};

std::string_view status_code_name(StatusCode code);
// The Redis error prefix for a code: "ERR", "OOM", "WRONGTYPE", "BUSY", ...
std::string_view error_prefix(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  static Status not_found(std::string m = "not found") {
    return {StatusCode::kNotFound, std::move(m)};
  }
  static Status invalid_argument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status too_large(std::string m) { return {StatusCode::kTooLarge, std::move(m)}; }
  static Status out_of_memory(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }
  static Status busy(std::string m) { return {StatusCode::kBusy, std::move(m)}; }
  static Status exists(std::string m = "exists") { return {StatusCode::kExists, std::move(m)}; }
  static Status conflict(std::string m) { return {StatusCode::kConflict, std::move(m)}; }
  static Status wrong_type(std::string m) { return {StatusCode::kWrongType, std::move(m)}; }
  static Status io_error(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "CODE: message", for logs and CLI errors.
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) { assert(!status_.is_ok()); }  // NOLINT

  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }

 private:
  Status status_;
  std::optional<T> value_;
};

#define TIERKV_RETURN_IF_ERROR(expr) \
  do {                               \
    ::tierkv::Status _st = (expr);   \
    if (!_st.is_ok()) return _st;    \
  } while (0)

}  // namespace tierkv
