// tierkv: the operator's command-line tool.
//
//   tierkv preheat SOURCE --key K [--no-cache] [--digest sha256:HEX] [--piece SIZE]
//                         [--ttl SECONDS] [--server HOST:PORT] [--quiet] [--no-wait]
//   tierkv size [--target HIT_RATIO] [--server HOST:PORT] [--user U --password P]
//   tierkv cluster status | drain NODE | rebalance [NODE...]
//                  [--etcd URL]... [--etcd-cacert F --etcd-cert F --etcd-key F]
//                  [--etcd-user U --etcd-password P] [--name NAME] [--timeout S]
//                  [--quiet] [--no-wait]
//
// preheat starts a TIER.PREHEAT job on a running server and shows its
// progress (bytes, rate, ETA) until it ends (preheat.h). SOURCE is an
// http(s):// or file:// URL, or a local path (made absolute; the server
// reads it, so it must be on the server's machine). Ctrl-C cancels the job.
// size shows the server's miss-ratio curves and the sizes that reach a
// target hit ratio (size.h).
// cluster shows and steers a cluster through etcd (cluster_admin.h).
// The exit code is 0 when done, 1 when the work failed, was cancelled or
// timed out, 2 for a usage or connection error; each failure prints one
// line.
#include <CLI/CLI.hpp>
#include <csignal>

#include "cli/tierkv/cli_common.h"
#include "cli/tierkv/cluster_admin.h"
#include "cli/tierkv/preheat.h"
#include "cli/tierkv/size.h"

namespace {

void add_preheat(CLI::App& app, tierkv::cli::PreheatArgs& a) {
  CLI::App* preheat = app.add_subcommand(
      "preheat", "Load a file or URL into the server's flash and memory, with progress");
  preheat->add_option("source", a.source, "http(s):// or file:// URL, or a local path")->required();
  preheat->add_option("--key", a.key, "Key to store it under")->required();
  preheat->add_flag("--no-cache", a.no_cache, "Write to flash only (default: memory too)");
  preheat->add_option("--digest", a.digest, "Expected content digest: sha256:<hex>");
  preheat->add_option("--piece", a.piece, "Piece size (e.g. 8mb; default: size / 500, 4-64 MiB)");
  preheat->add_option("--ttl", a.ttl, "Expire the key after this many seconds")
      ->check(CLI::PositiveNumber);
  preheat->add_option("--server", a.server, "Server address (any node of a cluster)")
      ->capture_default_str();
  preheat->add_flag("--quiet", a.quiet, "No progress bar");
  preheat->add_flag("--no-wait", a.no_wait, "Print the job id and return at once");
}

CLI::App* add_size(CLI::App& app, tierkv::cli::SizeArgs& a) {
  CLI::App* size = app.add_subcommand(
      "size", "Hit ratio at other memory and flash sizes (the server's miss-ratio curves)");
  size->add_option("--target", a.target, "Hit ratio to reach (0-1): say which sizes reach it")
      ->check(CLI::Range(0.0, 1.0));
  size->add_option("--server", a.server, "Server address")->capture_default_str();
  size->add_option("--user", a.user, "ACL user (with --password)");
  size->add_option("--password", a.password, "Password (or TIERKV_PASSWORD)")
      ->envname("TIERKV_PASSWORD");
  return size;
}

CLI::App* add_cluster(CLI::App& app, tierkv::cli::ClusterArgs& a) {
  CLI::App* cluster =
      app.add_subcommand("cluster", "Show and steer a cluster through etcd (its slot map)");
  cluster->require_subcommand(1);
  cluster->fallthrough();  // options given after the subcommand are the cluster's
  cluster->add_option("--etcd", a.etcd, "etcd endpoint (repeat for more)")->capture_default_str();
  cluster->add_option("--etcd-cacert", a.etcd_security.cacert,
                      "CA certificate etcd's must chain to (cluster-etcd-cacert)");
  cluster->add_option("--etcd-cert", a.etcd_security.cert,
                      "Client certificate for etcd (cluster-etcd-cert)");
  cluster->add_option("--etcd-key", a.etcd_security.key, "Its key (cluster-etcd-key)");
  cluster->add_option("--etcd-user", a.etcd_security.user, "etcd user (cluster-etcd-user)");
  cluster
      ->add_option("--etcd-password", a.etcd_security.password,
                   "Its password (cluster-etcd-password; or TIERKV_ETCD_PASSWORD)")
      ->envname("TIERKV_ETCD_PASSWORD");
  cluster->add_option("--name", a.name, "Cluster name (cluster-name)")->capture_default_str();
  cluster->add_option("--timeout", a.timeout_s, "Stop watching after this many seconds (0: never)")
      ->check(CLI::NonNegativeNumber);
  cluster->add_flag("--quiet", a.quiet, "No progress bar");
  cluster->add_flag("--no-wait", a.no_wait, "Ask, and return at once");
  cluster->add_subcommand("status", "The map, and each node's slots and moves");
  cluster->add_subcommand("drain", "Move every slot off a node, with progress")
      ->add_option("node", a.nodes, "Node id, id prefix (6+ characters) or host:port")
      ->required()
      ->expected(1);
  cluster->add_subcommand("rebalance", "End drains (of NODE, or all), with progress")
      ->add_option("node", a.nodes, "Node id, id prefix or host:port");
  return cluster;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = tierkv::cli;
  CLI::App app{"tierkv: the operator's tool for a tierkv server"};
  app.require_subcommand(1);
  cli::PreheatArgs preheat;
  cli::ClusterArgs cluster;
  cli::SizeArgs size;
  add_preheat(app, preheat);
  CLI::App* size_app = add_size(app, size);
  CLI::App* cluster_app = add_cluster(app, cluster);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "tierkv: %s\n", e.what());
    return 2;
  }
  std::signal(SIGINT, [](int) { cli::interrupted.store(true); });
  if (size_app->parsed()) return cli::run_size(size);
  if (!cluster_app->parsed()) return cli::run_preheat(preheat);
  if (cluster_app->got_subcommand("status")) return cli::run_cluster_status(cluster);
  if (cluster_app->got_subcommand("drain")) return cli::run_cluster_drain(cluster);
  return cli::run_cluster_rebalance(cluster);
}
