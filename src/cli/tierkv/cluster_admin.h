// tierkv cluster: shows and steers a cluster through etcd, where its truth
// is (src/cluster). The nodes' controller does the moving; these commands
// only state what is wanted and watch it happen.
//
//   status              the map, each node's slots, weight, state and the
//                       keys it moved (from its INFO);
//   drain NODE          moves every slot off NODE (it weighs 0 until
//                       rebalanced), with progress until it owns none;
//   rebalance [NODE..]  ends the drain of NODE (default: of every node),
//                       with progress until no slot is moving.
//
// NODE is a node id, a unique prefix of one (6 characters or more), or the
// node's host:port. Exit codes: 0 done; 1 not done (timed out or
// interrupted: the move goes on in the cluster); 2 usage, etcd or unknown
// node.
#pragma once

#include <string>
#include <vector>

#include "cluster/etcd_client.h"

namespace tierkv::cli {

struct ClusterArgs {
  std::vector<std::string> etcd{"http://127.0.0.1:2379"};
  cluster::EtcdSecurity etcd_security;  // the server's cluster-etcd-* keys
  std::string name = "tierkv";
  std::vector<std::string> nodes;  // drain: one; rebalance: any
  double timeout_s = 0;            // 0: wait as long as it takes
  bool quiet = false, no_wait = false;
};

int run_cluster_status(const ClusterArgs& a);
int run_cluster_drain(const ClusterArgs& a);
int run_cluster_rebalance(const ClusterArgs& a);

}  // namespace tierkv::cli
