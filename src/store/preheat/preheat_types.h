// What a preheat job is asked to do, and how it stands (Store::preheat,
// TIER.PREHEAT, TIER.JOB). See preheater.h for how jobs run.
#pragma once

#include "store/exclusive_runner.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace tierkv {

struct PreheatRequest {
  std::string key;
  std::string source;       // file:///path, http(s)://...
  uint64_t piece_size = 0;  // 0: the default rule
  bool cache = true;        // also fill memory
  std::string sha256;       // lower-case hex; empty: no check
  int64_t ttl_s = 0;        // 0: no expiry
  // The commit's last chunk is written under it (the server's gate), so the
  // key appears between two commands.
  ExclusiveRunner exclusive = nullptr;
};

enum class PreheatState : uint8_t { kQueued, kRunning, kDone, kFailed, kCancelled };
std::string_view preheat_state_name(PreheatState state);

struct PreheatJobStatus {
  uint64_t id = 0;
  std::string key;
  std::string source;
  PreheatState state = PreheatState::kQueued;
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;  // 0 until the source is open
  uint32_t pieces_done = 0;
  uint32_t pieces_total = 0;
  uint64_t piece_size = 0;
  uint64_t retries = 0;
  bool cached = false;      // a memory copy was filled
  double rate_bytes_s = 0;  // bytes done over the time running
  int64_t started_ms = 0;   // unix ms; 0 while queued
  int64_t finished_ms = 0;  // unix ms; 0 while not ended
  std::string error;
};

}  // namespace tierkv
