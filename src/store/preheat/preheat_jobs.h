// PreheatJobs: Store's one handle to preheat (TIER.PREHEAT and its job
// commands): start a job, or one per file of a folder; read a job's status
// or a page of them; cancel one. Every call is safe from any thread and
// never blocks on a source.
//
// Without a flash tier, or before the store has opened it (a background
// load), there is no preheater: a start is Unavailable, a lookup finds no
// job. The preheater is published once, with release ordering, by the
// thread that opens the flash tier; the Store that owns both outlives it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "store/preheat/preheat_types.h"

namespace tierkv {

class Preheater;

class PreheatJobs {
 public:
  // Validates a job's key (Store's max-key-size).
  using KeyCheck = std::function<Status(std::string_view key)>;
  explicit PreheatJobs(KeyCheck check_key) : check_key_(std::move(check_key)) {}
  PreheatJobs(const PreheatJobs&) = delete;
  PreheatJobs& operator=(const PreheatJobs&) = delete;

  // Once, when the flash tier opens.
  void attach(Preheater* preheater) { preheater_.store(preheater, std::memory_order_release); }

  // Queues a job (see Preheater::start); its id.
  Result<uint64_t> start(PreheatRequest request);
  std::optional<PreheatJobStatus> job(uint64_t id) const;
  // Up to `count` jobs from id `first_id` up (oldest first); `next_id`
  // becomes the id to continue from, 0 if none is left.
  std::vector<PreheatJobStatus> jobs(uint64_t first_id = 0, size_t count = SIZE_MAX,
                                     uint64_t* next_id = nullptr) const;
  // NotFound for an unknown id; OK (no change) for a job that already ended.
  Status cancel(uint64_t id);
  // TIER.PREHEAT PREFIX: one job per file under the file:// folder
  // `dir_url` (sorted by relative path; key = key_prefix + that path), all
  // or none: a folder with more than preheat-max-files files, or a job
  // refused, starts nothing. `options` gives the rest of each request.
  Result<std::vector<uint64_t>> start_folder(const std::string& key_prefix,
                                             const std::string& dir_url,
                                             const PreheatRequest& options);
  // The same on a preheat worker (a walk must not hold a network thread);
  // `done` runs there, or at once with an error if there is no preheater
  // or it is stopping.
  void start_folder_async(std::string key_prefix, std::string dir_url, PreheatRequest options,
                          std::function<void(Result<std::vector<uint64_t>>)> done);

  // Set at shutdown when jobs outlived shutdown-timeout-ms (a worker stuck
  // in a source that ignores its cancel): the process must not wait for
  // them.
  void mark_stuck() { stuck_.store(true, std::memory_order_relaxed); }
  bool stuck() const { return stuck_.load(std::memory_order_relaxed); }

 private:
  Preheater* preheater() const { return preheater_.load(std::memory_order_acquire); }

  const KeyCheck check_key_;
  std::atomic<Preheater*> preheater_{nullptr};
  std::atomic<bool> stuck_{false};
};

}  // namespace tierkv
