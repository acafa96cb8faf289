// tierkv preheat: starts a TIER.PREHEAT job and shows its progress until it
// ends. In a cluster, the job goes to the key's owner: a -MOVED answer is
// followed, and so is -ASK, after ASKING (the job runs, and is watched,
// there).
#pragma once

#include <cstdint>
#include <string>

namespace tierkv::cli {

struct PreheatArgs {
  std::string source, key, digest, piece, server = "127.0.0.1:6380";
  int64_t ttl = 0;
  bool no_cache = false, quiet = false, no_wait = false;
};

// 0: done; 1: failed or cancelled; 2: usage or connection error.
int run_preheat(const PreheatArgs& a);

}  // namespace tierkv::cli
