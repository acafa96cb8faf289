// MULTI/EXEC support shared by the connection and the EXEC handler.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "server/commands/command.h"

namespace tierkv::server {

inline constexpr std::string_view kExecAbort =
    "EXECABORT Transaction discarded because of previous errors.";

// Calls fn(i) for each argument index that the spec's key positions (as in
// COMMAND INFO: first, last (negative: from the end), step) name.
template <typename Fn>
void for_each_key_index(const CommandSpec& spec, size_t argc, Fn&& fn) {
  if (spec.first_key <= 0) return;
  size_t first = static_cast<size_t>(spec.first_key);
  size_t from_end = spec.last_key < 0 ? static_cast<size_t>(-spec.last_key) : 0;
  if (from_end > argc) return;
  size_t last = spec.last_key < 0 ? argc - from_end : static_cast<size_t>(spec.last_key);
  size_t step = spec.key_step > 0 ? static_cast<size_t>(spec.key_step) : 1;
  for (size_t i = first; i <= last && i < argc; i += step) fn(i);
}

// The same for the keys whose values the command reads (see
// CommandSpec::value_last_key).
template <typename Fn>
void for_each_value_key_index(const CommandSpec& spec, size_t argc, Fn&& fn) {
  for_each_key_index(spec, argc, [&](size_t i) {
    if (spec.value_last_key == 0 || i <= static_cast<size_t>(spec.value_last_key)) fn(i);
  });
}

// Appends a copy of the command to the transaction's queue. False, and
// nothing queued, if the queue would pass `limit` bytes (queued_bytes).
bool queue_command(TxnState& txn, const CommandSpec& spec,
                   const std::vector<std::string_view>& argv, int64_t limit);

// Inside MULTI, a command other than the control ones (kTxnControl) is
// queued and answered +QUEUED: true if so, and then it must not run. A
// queue that would pass `limit` bytes (client-query-buffer-limit: what a
// client has queued counts as what it sent) is dropped with an error, and
// EXEC answers -EXECABORT; a transaction already doomed queues nothing more.
bool queue_if_in_multi(TxnState& txn, const CommandSpec& spec,
                       const std::vector<std::string_view>& argv, int64_t limit,
                       ReplyBuffer& reply);

// A command refused before it could run (unknown, wrong arity, NOAUTH,
// LOADING): inside MULTI, EXEC will answer -EXECABORT.
inline void refuse_in_multi(TxnState& txn) {
  txn.dirty = txn.dirty || txn.in_multi;
}

// Replies `error` for a refused command (spec null: unknown). A refused
// EXEC ends the transaction and says why, as Redis's execCommandAbort.
inline void refuse_command(TxnState& txn, const CommandSpec* spec, std::string_view error,
                           ReplyBuffer& reply) {
  if (spec == nullptr || !(spec->flags & kRunsQueue)) {
    refuse_in_multi(txn);
    return reply.error(error);
  }
  txn.clear();
  if (error.starts_with("ERR ")) error.remove_prefix(4);
  std::string text = "EXECABORT Transaction discarded because of: ";
  text.append(error);
  reply.error(text);
}

// A command that cluster mode sends elsewhere (-MOVED, -CROSSSLOT, ...): as
// refuse_command(), except that EXEC discards its queue and answers the
// redirection as it is, as Redis 7 does, so that the client can follow it.
inline void refuse_routed(TxnState& txn, const CommandSpec* spec, std::string_view error,
                          ReplyBuffer& reply) {
  if (spec == nullptr || !(spec->flags & kRunsQueue))
    return refuse_command(txn, spec, error, reply);
  txn.clear();
  reply.error(error);
}

// The keys whose values the queued commands read (kReadsValue, or a GET
// that could stream): EXEC needs them in memory before it runs, because it
// cannot wait for flash while it holds the gate. Views into the queue.
std::vector<std::string_view> txn_value_keys(const TxnState& txn);

}  // namespace tierkv::server
