// The command table and what a command handler sees.
//
// A handler gets the parsed arguments, the calling client's state, the
// server-wide context, and a ReplyBuffer to answer into. Handlers never
// block on a network thread: what needs flash is either streamed later
// (ReplyDeferral) or loaded into memory before the handler runs (commands
// flagged kReadsValue). Arity follows Redis: a positive arity is exact (name
// included), a negative one is a minimum.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/inlined_vector.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/router.h"
#include "core/config.h"
#include "core/metrics.h"
#include "core/mutex.h"
#include "server/acl/acl_log.h"
#include "server/acl/acl_users.h"
#include "server/cluster/key_fence.h"
#include "server/cluster/prefetch_hints.h"
#include "server/commands/exec_gate.h"
#include "server/commands/txn_state.h"
#include "server/net/client_pause.h"
#include "server/observe/slowlog.h"
#include "server/protocol/number_text.h"
#include "server/protocol/reply.h"
#include "store/flashio/flash_value_sink.h"
#include "store/store.h"

namespace tierkv::server {

struct ClientState {
  uint64_t id = 0;
  std::string name;
  std::string lib_name, lib_ver;
  std::string addr;  // "ip:port" or "/path:0"
  std::string laddr;
  bool local = false;  // a loopback or Unix socket peer
  int64_t created_ms = 0;
  int64_t last_active_ms = 0;
  std::string last_command;
  bool authenticated = false;
  // The ACL user it runs as (default until AUTH), as of AclUsers
  // generation `acl_generation` (acl_gate.h takes newer rules).
  std::shared_ptr<const AclUser> user;
  uint64_t acl_generation = 0;
  Proto proto = Proto::kResp2;
  bool close_after_reply = false;  // QUIT, or a fatal protocol error
  bool no_evict = false;           // CLIENT NO-EVICT (there is no client eviction: a flag)
  bool no_touch = false;           // CLIENT NO-TOUCH: reads do not count as accesses
  TxnState txn;                    // MULTI / WATCH
  // TIER.STREAM: the keys this connection declared it reads next, in order;
  // its GETs and ranged reads go through it (commands_stream.cc).
  std::shared_ptr<StreamReader> stream;
  // Its ranged reads without a stream: sequential ones are read ahead
  // (readahead.h). Made at the first ranged read.
  std::shared_ptr<Readahead> readahead;
  // Cluster mode: ASKING was the previous command (it lets the next one
  // reach a slot being imported), and READONLY (no replicas: a flag only).
  bool asking = false;
  bool readonly = false;
  bool command_asked = false;  // the command being run came after ASKING
};

class ServerContext;
}  // namespace tierkv::server

namespace tierkv::cluster {
class Controller;
class Handoffs;
class Member;
}  // namespace tierkv::cluster

namespace tierkv::server {
class SlotMigrator;
class SlotPurger;
class PrefetchHints;

// How a handler finishes its reply later, without blocking its thread. The
// connection implements it; a caller that may block (tests, tools) passes
// none, and handlers then use the Store's blocking forms.
class ReplyDeferral {
 public:
  virtual ~ReplyDeferral() = default;
  // Callbacks for Store::read() that stream the flash part of the read as
  // one bulk reply. If read() answers kFlash, the handler must then call
  // stream_bulk() with the length and the read, and reply nothing else. The
  // read advances as the socket takes its pieces; closing cancels it.
  virtual FlashReadCallbacks bulk_stream_callbacks() = 0;
  virtual void stream_bulk(uint64_t length, std::shared_ptr<FlashRead> read) = 0;
  // Holds this command's reply until `version` of `key` is durable on
  // flash (fsync=always); if that fails the reply becomes -IOERR.
  virtual void persist(std::string_view key, uint64_t version) = 0;
  // The general form: holds the reply until the returned callback runs (the
  // Store calls it once a removal or expiry change is durable). Empty when
  // this reply is not held (fsync is not always).
  virtual Store::DurableCallback hold_until_durable() = 0;
  // A value the handler needs is only on flash (it left memory after the
  // fetch): the handler replied nothing; the connection fetches again and
  // reruns the command, with backoff, or answers -BUSY / -OOM.
  virtual void fetch_again() = 0;
  // TIER.GET ... WITHIN: `key` is only on flash. Fetches it into memory and
  // runs the command again when the fetch ends or when `bound_ms` have
  // passed since the command first asked, whichever comes first; the
  // handler replies nothing else. False once that bound has passed, after
  // a fetch that failed, or if this command cannot wait (inside EXEC): the
  // handler answers a miss.
  virtual bool fetch_within(std::string_view key, int64_t bound_ms) = 0;
  // True inside EXEC on a connection: a value only flash holds is not read
  // into memory first but answered by queue_stream(), in its turn.
  virtual bool queues_streams() const { return false; }
  // A bulk reply streamed from `held` (a read of `length` bytes made with
  // ReadOptions::hold) after the replies written so far. The replies of the
  // commands that follow go to the returned buffer, which is sent after it.
  // Null where replies cannot wait (see queues_streams).
  virtual ReplyBuffer* queue_stream(uint64_t length, std::shared_ptr<HeldRead> held) = 0;
  // A SET's value larger than memory went to flash as it arrived
  // (Invocation::flash_value): commits it off the network thread and
  // replies OK, nil (the condition failed) or the error. The handler
  // replies nothing else.
  virtual void commit_flash_value(const FlashValueSink::Commit& commit) = 0;
  // The source of a RENAME or COPY is on flash only: copies it flash to
  // flash off the network thread (Store::copy_on_flash) and answers with
  // `reply`; the handler replies nothing else. False if this command cannot
  // wait (inside EXEC) or must copy in memory after all: the handler goes on
  // as with any flash-only value.
  using CopyReply = std::function<void(ReplyBuffer&, const Result<FlashCopyOutcome>&)>;
  virtual bool copy_on_flash(FlashCopyRequest request, CopyReply reply) = 0;
  // Runs `work` on the connection's thread once the replies of the
  // current batch went to the socket: work the reply does not depend on
  // (a probe's prefetches), so that it does not delay the reply.
  virtual void after_reply(std::function<void()> work) = 0;
  // Work that must not run on the network thread (a folder walk): `start`
  // begins it elsewhere and hands `done` the reply to write, from any
  // thread; the connection reads nothing more until then. False if this
  // command cannot wait (inside EXEC): the handler does the work in place.
  using LaterReply = std::function<void(ReplyBuffer&)>;
  using ReplyLaterStart = std::function<void(std::function<void(LaterReply)> done)>;
  virtual bool reply_later(ReplyLaterStart start) = 0;
};

// Arguments of one command. For a large SET the parser streams the value
// straight into a Store writer instead of argv: then `value_writer` (memory)
// or `flash_value` (a value larger than memory) is set and argv[value_arg]
// is empty.
struct Invocation {
  std::vector<std::string_view> argv;
  ObjectWriter* value_writer = nullptr;
  FlashValueSink* flash_value = nullptr;
  size_t value_arg = 0;
};

struct CommandContext {
  Invocation& inv;
  ReplyBuffer& reply;
  ClientState& client;
  ServerContext& server;
  Store& store;
  ReplyDeferral* defer = nullptr;

  size_t argc() const { return inv.argv.size(); }
  std::string_view arg(size_t i) const { return inv.argv[i]; }
  // For Store calls that remove keys or change expiries: with fsync=always
  // the reply waits until what they wrote is durable.
  Store::DurableCallback durable() const {
    return defer != nullptr ? defer->hold_until_durable() : Store::DurableCallback{};
  }
};

using CommandHandler = void (*)(CommandContext& ctx);

enum CommandFlags : uint32_t {
  kWrite = 1 << 0,
  kReadOnly = 1 << 1,
  kNoAuth = 1 << 2,  // allowed before AUTH (AUTH, HELLO, QUIT, ...)
  kFast = 1 << 3,
  kAdmin = 1 << 4,
  kStreamsValue = 1 << 5,  // the parser may stream argument `value_arg` into a writer
  // The handler reads whole values of its keys: flash-only ones are fetched
  // into memory before it runs, so that it finds them there.
  kReadsValue = 1 << 6,
  // Runs while the store loads (Redis's "loading" flag); every other command
  // answers -LOADING until the flash index is ready. Such a command must not
  // touch the Store's data paths (see Store::open).
  kLoadingOk = 1 << 7,
  // Runs at once inside MULTI instead of being queued (EXEC, DISCARD,
  // MULTI, WATCH, QUIT, RESET), as in Redis.
  kTxnControl = 1 << 8,
  // Runs holding every I/O thread's gate slot (see exec_gate.h): no other
  // client's command runs while it does (EXEC, MSET, RENAME, ...).
  kExclusive = 1 << 9,
  // EXEC: the keys to fetch before it runs are those of the queued commands.
  kRunsQueue = 1 << 10,
  // GET: the reply may stream a flash-resident value. In a transaction its
  // keys are fetched into memory first, as kReadsValue's are.
  kMayStream = 1 << 11,
  // With kReadsValue (RENAME, COPY): a flash-only source is not fetched
  // first; the handler copies it flash to flash (ReplyDeferral::
  // copy_on_flash). In a transaction it is fetched, as kReadsValue says.
  kCopiesOnFlash = 1 << 12,
};

struct CommandSpec {
  std::string_view name;  // lower case
  int arity;
  uint32_t flags;
  int first_key, last_key, key_step;  // as in COMMAND INFO
  CommandHandler handler;
  std::string_view summary;  // for COMMAND DOCS
  int value_arg = 0;         // with kStreamsValue: the argument index of the value
  // With kReadsValue: if set, values are read only when it says so (SET
  // reads the old value only with GET).
  bool (*reads_value_if)(const Invocation& inv) = nullptr;
  // With kLoadingOk: if set, the command runs while loading only when it
  // says so (CONFIG GET does, CONFIG SET does not).
  bool (*loading_ok_if)(const Invocation& inv) = nullptr;
  // With kReadsValue: if nonzero, only the keys up to this argument are
  // read as values (RENAME reads its source, not the key it replaces).
  int value_last_key = 0;
  // If set, the index past the last key, for a command whose trailing
  // options are not keys (TIER.EXISTS ... PREFETCH, TIER.STREAM ... DEPTH d).
  size_t (*keys_end)(std::span<const std::string_view> argv) = nullptr;
  // Its ACL entry (acl_table.h), set by CommandTable::add: the check of
  // every command finds it without a lookup by name.
  const AclCommand* acl = nullptr;
};

// The keys of a command, as its key positions and keys_end say.
using CommandKeys = absl::InlinedVector<std::string_view, 8>;
CommandKeys command_keys(const CommandSpec& spec, std::span<const std::string_view> argv);

// Adds a finished command to SLOWLOG; the caller checked
// server.slowlog().wants(ns), which is all a fast command costs.
void log_slow_command(ServerContext& server, const CommandSpec& spec,
                      std::span<const std::string_view> argv, uint64_t ns,
                      const ClientState& client);

// This thread's copy of the newest slot map and this node's index in it:
// the hot path neither locks the Member nor touches the map's shared count
// (which two I/O threads would bounce between their caches).
struct CachedMap {
  const cluster::Member* member = nullptr;
  uint64_t publications = 0;
  std::shared_ptr<const cluster::SlotMap> map;
  size_t self = cluster::SlotMap::kNoNode;
};
const CachedMap& cached_map(const cluster::Member& member);

// How many of `keys` exist. A probe that prefetches answers from the
// indexes first and starts its prefetches after the reply (after_reply).
// In cluster mode, an exists-prefetch-map companion that another node owns
// is hinted to that node (prefetch_hints.h) instead of probed here.
int64_t count_existing(CommandContext& ctx, std::span<const std::string_view> keys,
                       const ExistOptions& options);

// False while the store loads, for a command that must then answer -LOADING.
bool runs_while_loading(const CommandSpec& spec, const Invocation& inv);

class CommandTable {
 public:
  void add(const CommandSpec& spec);
  // Case-insensitive lookup; nullptr if unknown.
  const CommandSpec* find(std::string_view name) const;
  const std::vector<CommandSpec>& all() const { return specs_; }

 private:
  std::vector<CommandSpec> specs_;
  absl::flat_hash_map<std::string, size_t> by_name_;
};

// Registration, one function per command family (one .cc file each).
void register_connection_commands(CommandTable& table);  // PING ECHO HELLO AUTH SELECT QUIT RESET
void register_client_commands(CommandTable& table);      // CLIENT
void register_server_commands(
    CommandTable& table);  // COMMAND CONFIG INFO DBSIZE FLUSH* TIME SHUTDOWN
void register_string_commands(CommandTable& table);    // GET SET ... SETRANGE
void register_counter_commands(CommandTable& table);   // INCR ... INCRBYFLOAT
void register_key_commands(CommandTable& table);       // DEL ... RANDOMKEY
void register_bit_commands(CommandTable& table);       // SETBIT GETBIT BITCOUNT BITPOS BITOP
void register_lcs_commands(CommandTable& table);       // LCS
void register_bitfield_commands(CommandTable& table);  // BITFIELD BITFIELD_RO
void register_tier_commands(CommandTable& table);      // TIER.STAT TIER.EXISTS
void register_stream_commands(CommandTable& table);    // TIER.READ TIER.STREAM
void register_txn_commands(CommandTable& table);       // MULTI EXEC DISCARD WATCH UNWATCH
void register_rename_commands(CommandTable& table);    // RENAME RENAMENX COPY
void register_object_commands(CommandTable& table);    // OBJECT MEMORY WAIT
void register_acl_commands(CommandTable& table);       // ACL
// Every family above, and the cluster and preheat commands.
void register_all_commands(CommandTable& table);
void register_slowlog_commands(CommandTable& table);  // SLOWLOG
void register_preheat_commands(CommandTable& table);  // TIER.PREHEAT TIER.JOB TIER.JOBS
void register_cluster_commands(CommandTable& table);  // CLUSTER ASKING READONLY READWRITE

// Cluster mode: the error a command gets instead of running here (-MOVED,
// -ASK, -CROSSSLOT, -TRYAGAIN, -CLUSTERDOWN), or "" to run it. Consumes the
// client's ASKING. EXEC is judged by the keys of its queued commands.
// A command on keys of a slot moving away from this node gets a pass of the
// key fence in `pass`, to hold until it has finished.
std::string cluster_refusal(ServerContext& server, const CommandSpec& spec,
                            std::span<const std::string_view> argv, ClientState& client,
                            std::optional<KeyFence::Pass>& pass);
// The same judgement again, for a command that waited (a flash fetch)
// without a pass: the map may have moved its slot meanwhile, or the
// migrator taken its key. Keeps the command's ASKING.
std::string cluster_reroute(ServerContext& server, const CommandSpec& spec,
                            std::span<const std::string_view> argv, ClientState& client,
                            std::optional<KeyFence::Pass>& pass);
// Whether a write of `key` made now, outside any command (a preheat job's
// publish, under the exec gate), lands where clients find it: "" if so,
// else the refusal a command would get (as if after ASKING). Holds a fence
// pass in `pass` while the slot moves away.
std::string cluster_write_refusal(ServerContext& server, std::string_view key,
                                  std::optional<KeyFence::Pass>& pass);

// Redis's exact error texts, shared by every handler.
namespace errors {
inline constexpr std::string_view kSyntax = "ERR syntax error";
inline constexpr std::string_view kNotInteger = "ERR value is not an integer or out of range";
inline constexpr std::string_view kNotFloat = "ERR value is not a valid float";
inline constexpr std::string_view kOverflow = "ERR increment or decrement would overflow";
// Redis's getIntFromObjectOrReply for a 64-bit integer outside int's range.
inline constexpr std::string_view kIntRange =
    "ERR value is out of range, value must between -2147483648 and 2147483647";
inline constexpr std::string_view kWrongType =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
inline constexpr std::string_view kNoAuth = "NOAUTH Authentication required.";
// Redis's text with our name, while the flash index loads.
inline constexpr std::string_view kLoading = "LOADING tierkv is loading the dataset in memory";
std::string wrong_arity(std::string_view command);  // ERR wrong number of arguments for 'x' command
std::string unknown_command(
    const Invocation& inv);  // ERR unknown command 'x', with args beginning with: ...
std::string invalid_expire(std::string_view command);  // ERR invalid expire time in 'x' command
}  // namespace errors

// Redis's replies of a command with subcommands: "ERR wrong number of
// arguments for 'parent|sub' command", "ERR unknown subcommand 'x'. Try
// PARENT HELP.", and a HELP reply of status lines.
void subcommand_arity_error(CommandContext& ctx, std::string_view parent, std::string_view sub);
void unknown_subcommand(CommandContext& ctx, std::string_view parent_upper);
void help_reply(CommandContext& ctx, std::initializer_list<std::string_view> lines);

// Redis's rule for CLIENT SETNAME and HELLO SETNAME: printable, no spaces.
bool valid_client_name(std::string_view name);

// Argument parsing helpers with Redis's semantics.
// (Numbers: server/number_text.h.)
bool iequals(std::string_view a, std::string_view b);

// CLIENT KILL's filters; an unset one matches every client.
struct ClientKillFilter {
  std::optional<uint64_t> id;
  std::optional<std::string> addr, laddr, user;
  bool match_none = false;  // TYPE master/replica/pubsub: tierkv has no such clients
};
struct ClientKillResult {
  size_t others = 0;  // other clients being closed
  bool matched_self = false;
};

// Server-wide state visible to handlers.
class ServerContext {
 public:
  ServerContext(Config config, Store& store, MetricsRegistry& metrics);

  Store& store() { return store_; }
  MetricsRegistry& metrics() { return metrics_; }
  const CommandTable& commands() const { return commands_; }
  CommandTable& mutable_commands() { return commands_; }

  // Configuration, changed at run time by CONFIG SET. Errors: NotFound
  // (unknown key), Unavailable (no apply hook: not settable at run time),
  // InvalidArgument, or whatever the key's apply function answers (then
  // nothing changed).
  Config config() const;
  Status set_config(std::string_view key, std::string_view value);
  // Several keys at once, all or nothing as Redis 7's CONFIG SET: every
  // value is parsed and checked first, then applied; if an apply function
  // fails, those already applied are rolled back. On failure `*failed` is
  // the index of the pair the error is about.
  using ConfigPair = std::pair<std::string_view, std::string_view>;
  Status set_configs(const std::vector<ConfigPair>& pairs, size_t* failed);

  // The limits the network path reads per command, without the config lock.
  struct Limits {
    std::atomic<int64_t> proto_max_bulk_len{0};
    std::atomic<int64_t> max_multibulk_args{0};
    std::atomic<int64_t> max_inline_len{0};
    std::atomic<int64_t> client_output_buffer_limit{0};
    std::atomic<int64_t> client_query_buffer_limit{0};
    std::atomic<int64_t> maxmemory_clients{0};
    std::atomic<int64_t> maxclients{0};
    std::atomic<int64_t> timeout_s{0};
    std::atomic<int64_t> max_object_size{0};
    std::atomic<bool> auth_required{false};
    std::atomic<bool> protected_mode{true};
    std::atomic<int64_t> metrics_timeout_ms{0};
    std::atomic<int64_t> metrics_max_clients{0};
    std::atomic<int64_t> acllog_max_len{0};
  };
  const Limits& limits() const { return limits_; }

  // Hooks the network layer installs.
  std::function<void(bool save)> request_shutdown;         // save: persist memory to flash first
  std::function<std::vector<std::string>()> list_clients;  // CLIENT LIST lines
  std::function<std::string(std::string_view section)> info_section;
  // Counts a command that EXEC ran (INFO commandstats, as Redis counts
  // them): its latency in ns and whether it replied an error.
  std::function<void(const CommandSpec& spec, uint64_t ns, bool failed)> account_queued;
  // CLIENT KILL: closes the matching clients other than `self_id` (each on
  // its own I/O thread) and says whether `self_id` matched too.
  std::function<ClientKillResult(const ClientKillFilter& filter, uint64_t self_id)> kill_clients;
  // CONFIG SET of a tls-* key: builds the TLS context from `next` for the
  // connections to come, or says why it cannot (nothing changes then).
  std::function<Status(const Config& next)> reload_tls;
  // CLIENT PAUSE / UNPAUSE changed the pause: held commands check again.
  std::function<void()> wake_paused_clients;

  uint64_t next_client_id() { return next_client_id_.fetch_add(1); }
  // Taken around every command handler by the connection (exec_gate.h).
  ExecGate& exec_gate() { return *exec_gate_; }
  // SLOWLOG; configured by slowlog-log-slower-than and slowlog-max-len.
  SlowLog& slowlog() { return slowlog_; }
  ClientPause& client_pause() { return *client_pause_; }
  // For what may outlive the server (a preheat job's publish runner).
  std::shared_ptr<const ClientPause> shared_client_pause() const { return client_pause_; }
  int64_t start_time_ms() const { return start_time_ms_; }
  // Cluster mode (cluster-enabled): this node's membership, set by the
  // server once it listens, and kept until every connection is gone; null
  // otherwise.
  cluster::Member* cluster() const { return cluster_.load(std::memory_order_acquire); }
  // Gained slots whose old keys are being removed (slot_purger.h).
  const SlotPurger* slot_purger() const { return purger_.load(std::memory_order_acquire); }
  // ACL users (acl_users.h) and ACL LOG. After a change to the users,
  // acl_changed() republishes whether new connections must AUTH.
  AclUsers& acl_users() { return acl_users_; }
  AclLog& acl_log() { return acl_log_; }
  void acl_changed();
  // Loads `aclfile` if the config names one (at start, and ACL LOAD).
  Status load_acl_file();
  // Commands answered -MOVED, -ASK, ... (tierkv_cluster_refusals_total).
  Counter& cluster_refusals(cluster::Route::Kind kind) {
    return *cluster_refusals_[static_cast<size_t>(kind)];
  }
  // This node's controller candidate (cluster-controller), or null.
  const cluster::Controller* controller() const {
    return controller_.load(std::memory_order_acquire);
  }
  // Keys moved between nodes with their slots (tierkv_cluster_keys_migrated_total).
  Counter& cluster_keys_migrated(bool in) { return in ? *keys_migrated_in_ : *keys_migrated_out_; }
  // Keys of slots moving away: commands enter it (key_fence.h).
  KeyFence* key_fence() const { return fence_.load(std::memory_order_acquire); }
  const SlotMigrator* slot_migrator() const { return migrator_.load(std::memory_order_acquire); }
  // Slots this node has just handed on (cluster/handoffs.h).
  const cluster::Handoffs* handoffs() const { return handoffs_.load(std::memory_order_acquire); }
  // What TIER.PREFETCH counts: the hints this node receives.
  const PrefetchHintsReceived& prefetch_hints_received() const { return hints_received_; }
  // TIER.GET's nulls for values only flash held (FROM memory, or past WITHIN).
  Counter& tier_get_bounded_misses(bool within) { return *tier_get_misses_[within ? 1 : 0]; }
  // Companion prefetches for other nodes (prefetch_hints.h); null without
  // cluster mode or with cluster-prefetch-hints off.
  PrefetchHints* prefetch_hints() const { return hints_.load(std::memory_order_acquire); }

  struct ClusterParts {
    cluster::Member* member = nullptr;
    const SlotPurger* purger = nullptr;
    const cluster::Controller* controller = nullptr;
    KeyFence* fence = nullptr;
    const SlotMigrator* migrator = nullptr;
    PrefetchHints* hints = nullptr;
    const cluster::Handoffs* handoffs = nullptr;
  };
  void set_cluster(const ClusterParts& parts) {
    controller_.store(parts.controller, std::memory_order_release);
    purger_.store(parts.purger, std::memory_order_release);
    fence_.store(parts.fence, std::memory_order_release);
    migrator_.store(parts.migrator, std::memory_order_release);
    hints_.store(parts.hints, std::memory_order_release);
    handoffs_.store(parts.handoffs, std::memory_order_release);
    cluster_.store(parts.member, std::memory_order_release);
  }

 private:
  std::atomic<cluster::Member*> cluster_{nullptr};
  std::atomic<const SlotPurger*> purger_{nullptr};
  std::atomic<const cluster::Controller*> controller_{nullptr};
  std::atomic<KeyFence*> fence_{nullptr};
  std::atomic<const SlotMigrator*> migrator_{nullptr};
  std::atomic<PrefetchHints*> hints_{nullptr};
  std::atomic<const cluster::Handoffs*> handoffs_{nullptr};
  std::array<Counter*, 7> cluster_refusals_{};  // by Route::Kind; kServe unused
  Counter* keys_migrated_in_ = nullptr;
  Counter* keys_migrated_out_ = nullptr;
  AclUsers acl_users_;
  AclLog acl_log_;
  mutable Mutex config_mu_;
  Config config_ ABSL_GUARDED_BY(config_mu_);
  Store& store_;
  MetricsRegistry& metrics_;
  PrefetchHintsReceived hints_received_;
  std::array<Counter*, 2> tier_get_misses_{};  // FROM memory, WITHIN
  CommandTable commands_;
  std::atomic<uint64_t> next_client_id_{1};
  int64_t start_time_ms_;
  Limits limits_;
  // Shared: a store worker's runner (ExecGate::runner) may outlive the server.
  std::shared_ptr<ExecGate> exec_gate_ = std::make_shared<ExecGate>();
  SlowLog slowlog_;
  std::shared_ptr<ClientPause> client_pause_ = std::make_shared<ClientPause>();
  void publish_limits() ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);  // config_ -> limits_
  // Makes `next` take effect for one hook (see ConfigApply).
  Status apply_config(ConfigApply hook, const Config& next)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
};

// Sets spdlog's level.
void apply_log_level(LogLevel level);

}  // namespace tierkv::server
