// Key walks (SCAN, KEYS, RANDOMKEY, CLUSTER COUNTKEYSINSLOT and
// GETKEYSINSLOT): where flash holds keys only on the device (compact index
// entries), a walk reads them one by one, so it runs on a store worker and
// its reply follows (ReplyDeferral::reply_later): the network thread's
// other clients do not wait for those reads. It runs in place when no key
// needs the device, inside EXEC, and when the workers are all busy.
#pragma once

#include <functional>

#include "server/commands/command.h"

namespace tierkv::server {

// Runs the walk and returns what writes its reply. It owns copies of its
// arguments: it may run on another thread after the handler has returned.
using KeyWalk = std::function<ReplyDeferral::LaterReply()>;

void run_key_walk(CommandContext& ctx, KeyWalk walk);

}  // namespace tierkv::server
