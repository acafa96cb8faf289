// FlashCopy: RENAME and COPY of a value that only flash holds, flash to
// flash, without loading it into memory. For a value larger than memory it
// is the only way; for any other it spares memory a copy nobody asked for.
//
// On a pool worker, the copy reads the source's chunks (a few in flight)
// and writes them into a StagedPut of the destination, all but the last.
// Then, inside `exclusive` (the server's: no command runs on any network
// thread meanwhile), it checks that the source is still the version it
// copied and that the destination's condition holds, writes the last chunk
// (its landing makes the destination visible) and, for a rename, removes
// the source. So no client sees both keys or neither. What the exclusion
// costs is one chunk write, during which every other command waits.
//
// A source changed during the copy, or a destination written meanwhile,
// starts the copy again (a few times, then Busy). A source whose newest
// version is in memory only is answered kSourceInMemory: the caller copies
// it there.
//
// Crash safety: the destination is durable before the source's tombstone
// is queued, so a crash between the two leaves both keys, never neither.
#pragma once

#include <absl/functional/function_ref.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "store/flashio/staged_put.h"

namespace tierkv {

class Store;
namespace flash {
class FlashTier;
}

struct FlashCopyRequest {
  std::string source;
  std::string destination;
  bool remove_source = false;  // RENAME: the source goes
  bool if_absent = false;      // RENAMENX, COPY without REPLACE
  bool durable = false;        // also wait for the source's tombstone (fsync=always)
};

enum class FlashCopyOutcome : uint8_t {
  kCopied,
  kDestinationExists,  // if_absent, and it did
  kNoSource,           // the source was gone (removed or expired) at the end
  kSourceInMemory,     // memory holds a version flash does not
};

class FlashCopy {
 public:
  FlashCopy(Store& store, flash::FlashTier& flash, FlashCopyRequest request,
            ExclusiveRunner exclusive);
  // Blocks on flash: call it from a worker.
  Result<FlashCopyOutcome> run();

 private:
  // One try; nullopt: something changed, try again.
  Result<std::optional<FlashCopyOutcome>> attempt();
  // Reads every chunk of `version` from where `known` saw it and writes it
  // into `put` (which holds the last one back).
  Status copy_chunks(StagedPut& put, uint64_t version,
                     const flash::FlashTier::VersionLocations& known);
  Result<std::optional<FlashCopyOutcome>> finish(StagedPut& put, uint64_t version);
  // Under the exclusion; `busy` if flash's write queue had no room.
  Result<std::optional<FlashCopyOutcome>> finish_exclusive(StagedPut& put, uint64_t version,
                                                           bool& busy);
  Status wait_for_tombstone();

  Store& store_;
  flash::FlashTier& flash_;
  const FlashCopyRequest request_;
  ExclusiveRunner exclusive_;
  struct Tombstone;
  std::shared_ptr<Tombstone> tombstone_;
};

}  // namespace tierkv
