// tierkv-kv-cache-bench: the KV-cache libraries' wire patterns, natively.
//
// resp:// (LMCache's C++ client): `--threads` threads, each with one blocking
// connection and one command in flight, a request's chunks spread over them.
// redis:// (LMCache's RedisConnector): the EXISTS chain of <k>metadata on one
// connection, chunk by chunk, then GET <k>metadata and GET <k>kv_bytes of
// every chunk at once, a pair per connection.
//
// Phases (--phase), each printing one JSON line:
//   set       SET every chunk (keys split over the threads): GB/s
//   get       GET every chunk: GB/s; every reply's length and first 8
//             bytes are checked (the chunk's index)
//   exists    EXISTS of every key, key by key: ops/s
//   prefix    TIER.EXISTS of --request-chunks keys PREFIX, one probe per
//             request: probes/s (tierkv only)
//   retrieve  --requests requests of --request-chunks chunks, resp:// style:
//             EXISTS of each key, then GET of each hit, spread over the
//             threads: p50 / p99 ms per request and GB/s
//   lmcache   the same requests, redis:// style (with --lmcache keys)
//   loopback  the bound: --threads TCP connections over loopback, each
//             writing --bytes-per-thread in --chunk writes, read and dropped;
//             with --into-memory, read into memory as large as the data
//             instead (a SET's bound: the server lands values in memory
//             that is not in cache)
//
// Replies are checked strictly, as the resp:// client does: exactly +OK,
// :0 or :1, and a bulk of the chunk's size; anything else ends the run.
//
// With --slots (a Redis Cluster's slot ranges and the port owning each),
// every thread holds one connection per node and sends each key's command
// to its slot's owner, as redis-cluster:// clients do, so nothing is
// redirected.
#include <time.h>  // linux/errqueue.h needs timespec first

#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cluster/key_slot.h"
#include "common/resp_connection.h"

namespace {

using tierkv::bench::Connection;
using tierkv::bench::encode_command;
using tierkv::bench::send_get;
using tierkv::bench::send_set;
using Clock = std::chrono::steady_clock;

struct Options {
  uint16_t port = 6390;
  std::string phase = "get";
  uint32_t threads = 8;
  uint64_t chunk = 4 << 20;
  uint64_t keys = 64;
  uint64_t requests = 50;
  uint64_t passes = 1;  // get, exists: times over every key
  uint32_t request_chunks = 16;
  bool lmcache = false;  // <k>kv_bytes and <k>metadata instead of one key per chunk
  uint64_t bytes_per_thread = 1ull << 30;
  bool zerocopy = false;     // loopback: MSG_ZEROCOPY sends
  bool into_memory = false;  // loopback: the reader lands the bytes in data-sized memory
  uint64_t seed = 1;
  std::string slots;  // "first-last=port,...": route by slot (cluster mode)
};

// A thread's connections: one to --port, or one per cluster node with the
// node of each slot (--slots).
class Links {
 public:
  explicit Links(const Options& o) {
    if (o.slots.empty()) {
      conns_.push_back(std::make_unique<Connection>(o.port));
      return;
    }
    node_of_slot_.assign(tierkv::cluster::kSlotCount, kNone);
    std::vector<uint16_t> ports;
    for (size_t at = 0; at < o.slots.size();) {
      size_t end = o.slots.find(',', at);
      if (end == std::string::npos) end = o.slots.size();
      unsigned first = 0, last = 0, port = 0;
      const std::string range = o.slots.substr(at, end - at);
      if (std::sscanf(range.c_str(), "%u-%u=%u", &first, &last, &port) != 3 || first > last ||
          last >= tierkv::cluster::kSlotCount || port == 0 || port > 65535)
        throw std::runtime_error("--slots: bad range '" + range + "'");
      auto it = std::find(ports.begin(), ports.end(), port);
      if (it == ports.end()) {
        ports.push_back(static_cast<uint16_t>(port));
        conns_.push_back(std::make_unique<Connection>(static_cast<uint16_t>(port)));
        it = ports.end() - 1;
      }
      std::fill(node_of_slot_.begin() + first, node_of_slot_.begin() + last + 1,
                static_cast<uint8_t>(it - ports.begin()));
      at = end + 1;
    }
    if (std::count(node_of_slot_.begin(), node_of_slot_.end(), kNone) > 0)
      throw std::runtime_error("--slots: a slot without a node");
  }
  // The connection to `key`'s node.
  Connection& to(std::string_view key) {
    if (conns_.size() == 1) return *conns_[0];
    return *conns_[node_of_slot_[tierkv::cluster::key_slot(key)]];
  }

 private:
  static constexpr uint8_t kNone = 255;
  std::vector<std::unique_ptr<Connection>> conns_;
  std::vector<uint8_t> node_of_slot_;
};

std::string key_of(const Options& o, uint64_t i, std::string_view suffix = "kv_bytes") {
  std::string k = "kvb@llama-8b@4@1@" + std::to_string(i) + "@bfloat16";
  if (o.lmcache) k += suffix;
  return k;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Runs fn(thread, links) on --threads threads, each with its own
// connections, all starting together; returns the wall time.
template <typename Fn>
double on_threads(const Options& o, Fn fn) {
  std::vector<std::unique_ptr<Links>> conns;
  for (uint32_t t = 0; t < o.threads; ++t) conns.push_back(std::make_unique<Links>(o));
  std::barrier start(o.threads + 1);
  std::vector<std::jthread> workers;
  for (uint32_t t = 0; t < o.threads; ++t)
    workers.emplace_back([&, t] {
      start.arrive_and_wait();
      fn(t, *conns[t]);
    });
  start.arrive_and_wait();
  const Clock::time_point t0 = Clock::now();
  workers.clear();  // joins
  return seconds_since(t0);
}

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

void set_one(Links& links, const Options& o, uint64_t i, std::string& value) {
  std::memcpy(value.data(), &i, sizeof(i));
  int64_t len;
  uint64_t head;
  const std::string key = key_of(o, i);
  send_set(links.to(key), key, value);
  expect(links.to(key).read_reply(&len, &head) == "+OK", "SET: not +OK");
  if (!o.lmcache) return;
  const std::string metadata = key_of(o, i, "metadata");
  send_set(links.to(metadata), metadata, std::string_view(value.data(), 28));
  expect(links.to(metadata).read_reply(&len, &head) == "+OK", "SET metadata: not +OK");
}

void get_one(Links& links, const Options& o, uint64_t i, std::string_view suffix = "kv_bytes") {
  int64_t len;
  uint64_t head;
  const std::string key = key_of(o, i, suffix);
  Connection& c = links.to(key);
  send_get(c, key);
  c.read_reply(&len, &head);
  const auto want = static_cast<int64_t>(suffix == "metadata" ? 28 : o.chunk);
  expect(len == want, "GET " + std::to_string(i) + ": length " + std::to_string(len));
  expect(head == i, "GET " + std::to_string(i) + ": another chunk's bytes");
}

bool exists_one(Links& links, const std::string& key) {
  int64_t len;
  uint64_t head;
  Connection& c = links.to(key);
  c.send({encode_command({"EXISTS", key})});
  const std::string r = c.read_reply(&len, &head);
  expect(r == ":0" || r == ":1", "EXISTS: " + r);
  return r == ":1";
}

void print(const Options& o, double secs, uint64_t ops, uint64_t bytes, const std::string& extra) {
  std::printf(
      "{\"phase\":\"%s\",\"threads\":%u,\"chunk\":%llu,\"seconds\":%.4f,\"ops\":%llu,"
      "\"ops_per_s\":%.1f,\"gbps\":%.4f%s}\n",
      o.phase.c_str(), o.threads, static_cast<unsigned long long>(o.chunk), secs,
      static_cast<unsigned long long>(ops), static_cast<double>(ops) / secs,
      static_cast<double>(bytes) / secs / 1e9, extra.c_str());
}

void bulk_phase(const Options& o) {
  const double secs = on_threads(o, [&](uint32_t t, Links& c) {
    std::string value(o.chunk, 'v');
    const uint64_t passes = o.phase == "set" ? 1 : o.passes;
    for (uint64_t pass = 0; pass < passes; ++pass) {
      for (uint64_t i = t; i < o.keys; i += o.threads) {
        if (o.phase == "set") set_one(c, o, i, value);
        if (o.phase == "get") get_one(c, o, i);
        if (o.phase == "exists") expect(exists_one(c, key_of(o, i, "metadata")), "EXISTS: :0");
      }
    }
  });
  if (o.phase == "exists") return print(o, secs, o.keys * o.passes, 0, "");
  const uint64_t passes = o.phase == "set" ? 1 : o.passes;
  print(o, secs, o.keys * passes, o.keys * passes * o.chunk, "");
}

std::vector<uint64_t> request_starts(const Options& o) {
  std::mt19937_64 rng(o.seed);
  std::vector<uint64_t> starts;
  for (uint64_t r = 0; r < o.requests; ++r)
    starts.push_back(rng() % (o.keys - o.request_chunks + 1));
  return starts;
}

void prefix_phase(const Options& o) {
  const std::vector<uint64_t> starts = request_starts(o);
  const double secs = on_threads(o, [&](uint32_t t, Links& c) {
    for (uint64_t r = t; r < starts.size(); r += o.threads) {
      std::vector<std::string> keys;
      for (uint32_t j = 0; j < o.request_chunks; ++j) keys.push_back(key_of(o, starts[r] + j));
      std::vector<std::string_view> args{"TIER.EXISTS"};
      args.insert(args.end(), keys.begin(), keys.end());
      args.push_back("PREFIX");
      int64_t len;
      uint64_t head;
      c.to(keys[0]).send({encode_command(args)});
      expect(c.to(keys[0]).read_reply(&len, &head) == ":" + std::to_string(o.request_chunks),
             "PREFIX");
    }
  });
  print(o, secs, starts.size(), 0, "");
}

// One request at a time; its chunks spread over the threads (resp://), or
// the EXISTS chain on thread 0 and then the GET pairs (redis://).
void retrieve_phase(const Options& o) {
  const std::vector<uint64_t> starts = request_starts(o);
  std::vector<double> ms, lookup_ms;
  Clock::time_point t0;
  const bool lmcache = o.phase == "lmcache";
  // A request is the barrier's phases start, [lookup done,] end.
  const uint64_t phases = lmcache ? 3 : 2;
  uint64_t completed = 0;
  std::barrier sync(o.threads, [&]() noexcept {
    const uint64_t phase = completed++ % phases;
    if (phase == 0) t0 = Clock::now();
    if (phase == 1 && phases == 3) lookup_ms.push_back(seconds_since(t0) * 1e3);
    if (phase == phases - 1) ms.push_back(seconds_since(t0) * 1e3);
  });
  const double secs = on_threads(o, [&](uint32_t t, Links& c) {
    for (uint64_t r = 0; r < starts.size(); ++r) {
      sync.arrive_and_wait();
      const uint64_t first = starts[r];
      if (lmcache) {
        if (t == 0) {
          for (uint32_t j = 0; j < o.request_chunks; ++j)
            expect(exists_one(c, key_of(o, first + j, "metadata")), "lookup: a miss");
        }
        sync.arrive_and_wait();
      }
      for (uint32_t j = t; j < o.request_chunks; j += o.threads) {
        if (lmcache) {
          get_one(c, o, first + j, "metadata");
        } else {
          expect(exists_one(c, key_of(o, first + j)), "lookup: a miss");
        }
        get_one(c, o, first + j);
      }
      sync.arrive_and_wait();
    }
  });
  auto pct = [](std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
  };
  char extra[160];
  std::snprintf(extra, sizeof(extra), ",\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"lookup_p50_ms\":%.3f",
                pct(ms, 0.5), pct(ms, 0.99), pct(lookup_ms, 0.5));
  print(o, secs, starts.size(), starts.size() * o.request_chunks * o.chunk, extra);
}

// MSG_ZEROCOPY's completions of `fd` read so far: how many sends there
// were, and how many of them the kernel copied after all (as it does for
// loopback, where the receiver may hold the pages indefinitely).
struct ZerocopyCompletions {
  uint64_t done = 0, copied = 0;
  // Reads the completions waiting; true if there were any.
  bool reap(int fd) {
    bool any = false;
    for (;;) {
      char control[128];
      msghdr msg{};
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      if (::recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return any;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        auto* e = reinterpret_cast<sock_extended_err*>(CMSG_DATA(c));
        if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
        const uint64_t n = uint64_t{e->ee_data} - e->ee_info + 1;
        done += n;
        if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED) copied += n;
        any = true;
      }
    }
  }
};

// The loopback bound: the same number of streams, each sending from a
// buffer as large as its share of the data (memory, not cache, as the
// server's chunks are) in 1 MiB writes, as the server's replies go out, to
// a reader that drops the bytes.
void loopback_phase(const Options& o) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof(addr);
  expect(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
             ::listen(listener, 64) == 0 &&
             ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &alen) == 0,
         "loopback listener");
  std::vector<std::pair<int, int>> pairs;
  for (uint32_t t = 0; t < o.threads; ++t) {
    const int w = ::socket(AF_INET, SOCK_STREAM, 0);
    expect(::connect(w, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "connect");
    pairs.emplace_back(w, ::accept(listener, nullptr, nullptr));
  }
  constexpr uint64_t kWrite = 1 << 20;
  const uint64_t span = std::max<uint64_t>(kWrite, o.keys * o.chunk / o.threads / kWrite * kWrite);
  std::vector<std::string> sources, sinks;
  for (uint32_t t = 0; t < o.threads; ++t) {
    sources.emplace_back(span, 'x');
    if (o.into_memory) sinks.emplace_back(span, 'y');  // touched: no page faults in the run
  }
  std::vector<ZerocopyCompletions> completions(o.threads);
  const int one = 1;
  for (auto [w, r] : pairs)
    expect(!o.zerocopy || ::setsockopt(w, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) == 0,
           "SO_ZEROCOPY");
  const Clock::time_point t0 = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (uint32_t t = 0; t < o.threads; ++t) {
      const auto [w, r] = pairs[t];
      threads.emplace_back([&, w = w, t] {
        for (uint64_t sent = 0; sent < o.bytes_per_thread;) {
          const uint64_t at = sent % span;
          const uint64_t n = std::min({kWrite, span - at, o.bytes_per_thread - sent});
          const ssize_t k = ::send(w, sources[t].data() + at, n, o.zerocopy ? MSG_ZEROCOPY : 0);
          if (k < 0 && errno == ENOBUFS) {  // too many sends not completed
            if (!completions[t].reap(w)) std::this_thread::yield();
            continue;
          }
          expect(k > 0, "loopback send");
          sent += static_cast<uint64_t>(k);
          if (o.zerocopy) completions[t].reap(w);
        }
      });
      threads.emplace_back([&, r = r, t] {
        // As the client drops a GET's bytes (one reused buffer), or, with
        // --into-memory, as the server lands a SET's: across the data.
        std::vector<char> scratch(o.into_memory ? 0 : 256 << 10);
        std::string& sink = o.into_memory ? sinks[t] : sources[t];
        for (uint64_t got = 0; got < o.bytes_per_thread;) {
          const uint64_t at = got % span;
          char* into = o.into_memory ? sink.data() + at : scratch.data();
          const size_t room =
              o.into_memory ? std::min<uint64_t>(kWrite, span - at) : scratch.size();
          const ssize_t n = ::recv(r, into, room, 0);
          expect(n > 0, "loopback recv");
          got += static_cast<uint64_t>(n);
        }
      });
    }
  }
  const double secs = seconds_since(t0);
  uint64_t done = 0, copied = 0;
  for (uint32_t t = 0; t < o.threads; ++t) {
    completions[t].reap(pairs[t].first);
    done += completions[t].done;
    copied += completions[t].copied;
  }
  for (auto [w, r] : pairs) ::close(w), ::close(r);
  ::close(listener);
  char extra[96] = "";
  if (o.zerocopy)
    std::snprintf(extra, sizeof(extra), ",\"zerocopy_sends\":%llu,\"zerocopy_copied\":%llu",
                  static_cast<unsigned long long>(done), static_cast<unsigned long long>(copied));
  print(o, secs, o.threads, o.threads * o.bytes_per_thread, extra);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"tierkv-kv-cache-bench: LMCache's resp:// and redis:// patterns"};
  app.add_option("--port", o.port);
  app.add_option("--phase", o.phase)
      ->check(CLI::IsMember({"set", "get", "exists", "prefix", "retrieve", "lmcache", "loopback"}));
  app.add_option("--threads", o.threads)->check(CLI::Range(1u, 256u));
  app.add_option("--chunk", o.chunk, "chunk size in bytes")->check(CLI::Range(64ull, 1ull << 30));
  app.add_option("--keys", o.keys, "chunks stored")->check(CLI::Range(1ull, 1ull << 24));
  app.add_option("--requests", o.requests)->check(CLI::Range(1ull, 1ull << 20));
  app.add_option("--passes", o.passes, "get, exists: times over every key")
      ->check(CLI::Range(1ull, 1ull << 20));
  app.add_option("--request-chunks", o.request_chunks)->check(CLI::Range(1u, 4096u));
  app.add_flag("--lmcache", o.lmcache, "redis:// keys: <k>kv_bytes and <k>metadata");
  app.add_option("--bytes-per-thread", o.bytes_per_thread);
  app.add_option("--seed", o.seed);
  app.add_flag("--zerocopy", o.zerocopy, "loopback: send with MSG_ZEROCOPY");
  app.add_flag("--into-memory", o.into_memory, "loopback: receive into data-sized memory");
  app.add_option("--slots", o.slots, "cluster: first-last=port,... (each key to its slot's node)");
  CLI11_PARSE(app, argc, argv);
  if (o.request_chunks > o.keys) {
    std::fprintf(stderr, "error: --request-chunks exceeds --keys\n");
    return 2;
  }
  try {
    if (o.phase == "loopback")
      loopback_phase(o);
    else if (o.phase == "prefix")
      prefix_phase(o);
    else if (o.phase == "retrieve" || o.phase == "lmcache")
      retrieve_phase(o);
    else
      bulk_phase(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
