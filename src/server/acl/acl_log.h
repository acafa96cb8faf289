// AclLog: ACL LOG, the recent denials (a command or key refused, a failed
// AUTH), newest first, as Redis 7.0 keeps them: a denial like one logged in
// the last 60 s (same reason, context, object and user) counts in that
// entry instead of adding one, and the log keeps at most `acllog-max-len`
// entries. Thread-safe.
#pragma once

#include <absl/base/thread_annotations.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/mutex.h"

namespace tierkv::server {

struct AclDenial {
  std::string reason;   // "command", "key" or "auth"
  std::string context;  // "toplevel" or "multi"
  std::string object;   // the command ("config|set"), the key, or "AUTH"
  std::string username;
  std::string client_info;  // CLIENT INFO's line of the client
};

struct AclLogEntry {
  AclDenial denial;
  uint64_t count = 1;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

class AclLog {
 public:
  void add(AclDenial denial, int64_t now_ms, size_t max_len);
  // The newest `count` entries (all if negative).
  std::vector<AclLogEntry> newest(int64_t count) const;
  void reset();
  void trim(size_t max_len);

 private:
  mutable Mutex mu_;
  std::deque<AclLogEntry> entries_ ABSL_GUARDED_BY(mu_);  // newest first
};

}  // namespace tierkv::server
