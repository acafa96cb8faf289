// Drives command handlers directly (no sockets): a Store, a ServerContext,
// the data command families, and RESP bytes out.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/commands/command.h"
#include "server/commands/transaction.h"

namespace tierkv::server {

inline Config harness_config() {
  Config c;
  c.flash_size = 0;  // memory only: no flash file in the working directory
  c.memory = int64_t{256} << 20;
  c.chunk_size = 64 << 10;  // small chunks: multi-chunk values stay cheap
  c.active_expire_hz = 10;
  return c;
}

class CommandHarness {
 public:
  explicit CommandHarness(Config config = harness_config())
      : store_(open(config, metrics_)), server_(config, *store_, metrics_) {
    register_string_commands(table_);
    register_counter_commands(table_);
    register_key_commands(table_);
    register_tier_commands(table_);
    register_txn_commands(table_);
    register_rename_commands(table_);
    register_object_commands(table_);
  }

  Store& store() { return *store_; }
  ServerContext& server() { return server_; }
  const CommandTable& table() const { return table_; }

  // Runs one command and returns the RESP bytes it replied (arity is
  // checked here as the connection layer would).
  std::string run(const std::vector<std::string>& args, Proto proto = Proto::kResp2,
                  ObjectWriter* value_writer = nullptr, size_t value_arg = 0) {
    ClientState client;
    client.proto = proto;
    return run_as(client, args, value_writer, value_arg);
  }

  // The same for one client whose state (MULTI, WATCH) lasts across calls;
  // queues inside MULTI as the connection does.
  std::string run_as(ClientState& client, const std::vector<std::string>& args,
                     ObjectWriter* value_writer = nullptr, size_t value_arg = 0) {
    Invocation inv;
    for (const std::string& a : args) inv.argv.emplace_back(a);
    inv.value_writer = value_writer;
    inv.value_arg = value_arg;
    ReplyBuffer reply(client.proto);
    const CommandSpec* spec = table_.find(inv.argv[0]);
    if (spec == nullptr) {
      refuse_command(client.txn, nullptr, errors::unknown_command(inv), reply);
    } else if (int n = static_cast<int>(inv.argv.size());
               spec->arity > 0 ? n != spec->arity : n < -spec->arity) {
      refuse_command(client.txn, spec, errors::wrong_arity(spec->name), reply);
    } else if (!queue_if_in_multi(
                   client.txn, *spec, inv.argv,
                   server_.limits().client_query_buffer_limit.load(std::memory_order_relaxed),
                   reply)) {
      CommandContext ctx{inv, reply, client, server_, *store_};
      spec->handler(ctx);
    }
    return drain(reply);
  }

  static std::string drain(ReplyBuffer& reply) {
    std::vector<std::string_view> segments;
    reply.gather(segments, SIZE_MAX);
    std::string out;
    for (std::string_view s : segments) out.append(s);
    reply.consume(out.size());
    return out;
  }

 private:
  static std::unique_ptr<Store> open(const Config& config, MetricsRegistry& metrics) {
    Result<std::unique_ptr<Store>> s = Store::open(config, &metrics);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return std::move(s).value();
  }

  MetricsRegistry metrics_;
  std::unique_ptr<Store> store_;
  ServerContext server_;
  CommandTable table_;
};

// Concatenation by appending: GCC 12 at -O3 warns falsely (-Wrestrict) on
// `"literal" + std::string`.
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  (out.append(std::string_view(parts)), ...);
  return out;
}

// RESP2 encodings, for readable expectations.
inline std::string bulk(std::string_view s) {
  return cat("$", std::to_string(s.size()), "\r\n", s, "\r\n");
}
inline std::string integer(int64_t v) {
  return cat(":", std::to_string(v), "\r\n");
}
inline std::string err(std::string_view s) {
  return cat("-", s, "\r\n");
}
inline const std::string kOk = "+OK\r\n";
inline const std::string kNull = "$-1\r\n";

}  // namespace tierkv::server
