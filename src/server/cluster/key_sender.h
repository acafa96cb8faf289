// KeySender: one logged-in link from a node moving slots away to one of
// their new owners. It sends keys as ASKING + SET key value [PXAT ms],
// pipelined, and settles each one from the target's replies.
//
// Contract (the SlotMigrator fences the keys first):
// * a value goes out from the chunks where it lies (sendmsg over them):
//   nothing is copied into a request buffer; at most `piece_bytes` of
//   pinned values are held between two sends;
// * a value larger than `batch_bytes` streams alone, `piece_bytes` at a
//   time, from memory or flash, so a value larger than memory moves too;
//   one that changes while it streams cuts the link, and the target drops
//   what it received (never committed: no value is half-moved);
// * a key the target acknowledged is removed here (if still the version
//   sent); its tombstone's landing reports to the caller's StatusWait;
// * a key the target refuses for good (larger than its limits) is dropped
//   here too: a miss, as a cache allows;
// * any other refusal leaves the key here and is returned as Busy with the
//   target's reply; an I/O error means the link is gone, and the keys whose
//   replies were not read are in doubt.
// Not thread-safe, except shutdown(), which cuts a blocked send or receive.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/slot_map.h"
#include "core/metrics.h"
#include "core/resp_client.h"
#include "core/status_wait.h"
#include "server/cluster/peer_link.h"
#include "store/store.h"

namespace tierkv::server {

// The CLIENT SETNAME of a migrator's connection: its keys count as
// migrated in on the receiving node.
inline constexpr std::string_view kMigratorClientName = "tierkv-slot-migrator";

// What every link of one migrator adds to.
struct MoveCounters {
  Counter* keys_out = nullptr;  // the keys the targets took
  std::atomic<uint64_t> bytes_out{0}, keys_dropped{0};
};

struct KeySenderOptions {
  uint64_t batch_bytes = 4 << 20;  // values up to this are pipelined whole
  uint64_t piece_bytes = 1 << 20;  // bytes held between sends; a larger value's pieces
  std::chrono::milliseconds io_timeout{10000};
};

class KeySender {
 public:
  // A link to `target` logged in as `login` says; Busy (with the reply) if
  // the target refused the login.
  static Result<std::unique_ptr<KeySender>> connect(Store& store, MoveCounters& counters,
                                                    const cluster::ClusterNode& target,
                                                    const MigratorCredentials& login,
                                                    const KeySenderOptions& options);

  const std::string& address() const { return address_; }
  // Sends `keys`: OK if every one moved (or was gone already), Busy with the
  // first refusal if the target refused some (they stay here), or the I/O
  // error that cut the link.
  Status send(const std::vector<std::string>& keys, StatusWait& removals);
  void shutdown() { client_.shutdown(); }

 private:
  struct Sent {
    const std::string* key;
    uint64_t version, size;
  };
  KeySender(Store& store, MoveCounters& counters, std::string address, RespClient client,
            const KeySenderOptions& options);
  // Queues `key`'s SET (its framing in `framing_`, its value pinned).
  void queue(const std::string& key, ObjectView value);
  // Sends what is queued, if anything.
  Status flush();
  // Flushes, then settles every key sent: OK, or the first refusal (Busy).
  Status settle_sent(StatusWait& removals);
  Status send_large(const std::string& key, const ObjectInfo& info, StatusWait& removals);
  // Reads the ASKING and SET replies of one key and acts on them.
  Status settle(const Sent& sent, StatusWait& removals);

  Store& store_;
  MoveCounters& counters_;
  const std::string address_;
  RespClient client_;
  const KeySenderOptions options_;
  // What the next flush sends: framing text and pinned values, in order.
  // Framing is kept as offsets into `framing_` (which grows).
  struct Piece {
    size_t framing_begin, framing_end;  // of framing_, when value < 0
    ptrdiff_t value;                    // index in values_, or -1
  };
  std::string framing_;
  std::vector<ObjectView> values_;
  std::vector<Piece> pieces_;
  uint64_t queued_bytes_ = 0;
  std::vector<Sent> sent_;                // sent, replies not read yet
  std::vector<std::string_view> gather_;  // what one send() takes, reused
};

}  // namespace tierkv::server
