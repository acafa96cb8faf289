"""Helpers of the tests of slot moves (test_cluster_migration.py,
test_cluster_restarts.py): nodes that the controller of cluster "mig"
balances, their INFO, drains through etcd and the CLI, and a model of
the keys written through a cluster client."""
import subprocess

import pytest
from redis.cluster import ClusterNode, RedisCluster

from cluster_util import SLOTS, Etcd
from test_preheat import tierkv_cli

MIB = 1 << 20


@pytest.fixture
def managed(make_tierkv):
    """Start nodes that the controller of cluster "mig" balances."""
    etcd = Etcd()

    def start(*extra):
        return make_tierkv("--cluster-enabled", "yes", "--cluster-etcd", etcd.endpoint,
                           "--cluster-name", "mig", "--cluster-lease-ttl", "2", *extra)

    yield etcd, start
    etcd.close()


def info(node, **kw):
    return node.client(**kw).info("cluster")


def owned(nodes):
    return [info(n).get("cluster_slots_owned", 0) for n in nodes]


def settled(nodes, want, **kw):
    """Every slot owned, none moving, and each node owning `want(i)` slots."""
    infos = [info(n, **kw) for n in nodes]
    if any(i.get("cluster_slots_migrating_out", 1) != 0 for i in infos):
        return False
    counts = [i.get("cluster_slots_owned", 0) for i in infos]
    return sum(counts) == SLOTS and all(want(i, c) for i, c in enumerate(counts))


def node_id(node, **kw):
    return node.client(**kw).execute_command("CLUSTER", "MYID").decode()


def drain(etcd, node, **kw):
    etcd.put(f"/tierkv/mig/drain/{node_id(node, **kw)}", "")


def client_of(nodes, **kw):
    return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in nodes],
                        decode_responses=False, cluster_error_retry_attempts=10, **kw)


def owner(nodes, key):
    slot = nodes[0].client().execute_command("CLUSTER", "KEYSLOT", key)
    for first, last, primary, *_ in nodes[0].client().execute_command("CLUSTER", "SLOTS"):
        if first <= slot <= last:
            return next(n for n in nodes if n.port == primary[1])
    raise AssertionError(f"no owner for slot {slot}")


def cluster_cli(etcd, *args, timeout=120):
    return subprocess.run([tierkv_cli(), "cluster", *args, "--etcd", etcd.endpoint,
                           "--name", "mig", "--timeout", "90"],
                          capture_output=True, text=True, timeout=timeout)


def write_keys(rc, prefix, n, model):
    for i in range(n):
        k, v = f"{prefix}{i}", f"{prefix}{i}=v".encode()
        assert rc.set(k, v)
        model[k] = v


def assert_holds(nodes, model, **kw):
    """Every key of `model` reads its value through the cluster, and the
    nodes hold no other key (none left behind where no one routes)."""
    rc = client_of(nodes, **kw)
    missing = [k for k, v in model.items() if rc.get(k) != v]
    assert not missing, f"{len(missing)} of {len(model)} keys lost, e.g. {missing[:5]}"
    assert sum(n.client(**kw).dbsize() for n in nodes) == len(model)
    rc.close()
