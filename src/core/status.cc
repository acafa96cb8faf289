#include "core/status.h"

namespace tierkv {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case StatusCode::kTooLarge:
      return "TOO_LARGE";
    case StatusCode::kOutOfMemory:
      return "OUT_OF_MEMORY";
    case StatusCode::kBusy:
      return "BUSY";
    case StatusCode::kExists:
      return "EXISTS";
    case StatusCode::kConflict:
      return "CONFLICT";
    case StatusCode::kWrongType:
      return "WRONG_TYPE";
    case StatusCode::kIOError:
      return "IO_ERROR";
    case StatusCode::kCorruption:
      return "CORRUPTION";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string_view error_prefix(StatusCode code) {
  switch (code) {
    case StatusCode::kOutOfMemory:
      return "OOM";
    case StatusCode::kWrongType:
      return "WRONGTYPE";
    case StatusCode::kBusy:
      return "BUSY";
    case StatusCode::kIOError:
    case StatusCode::kCorruption:
      return "IOERR";
    default:
      return "ERR";
  }
}

std::string Status::to_string() const {
  if (is_ok()) return "OK";
  std::string out(status_code_name(code_));
  out += ": ";
  out += message_;
  return out;
}

}  // namespace tierkv
