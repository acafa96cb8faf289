#include "server/commands/key_walk.h"

#include <utility>

namespace tierkv::server {

void run_key_walk(CommandContext& ctx, KeyWalk walk) {
  if (ctx.defer != nullptr && ctx.store.key_walks_read_flash()) {
    Store& store = ctx.store;
    auto start = [&store, walk](std::function<void(ReplyDeferral::LaterReply)> done) {
      // Busy workers (run = false): the walk runs here, as it would in place.
      store.run_key_walk([walk, done](bool) { done(walk()); });
    };
    if (ctx.defer->reply_later(start)) return;
  }
  walk()(ctx.reply);
}

}  // namespace tierkv::server
