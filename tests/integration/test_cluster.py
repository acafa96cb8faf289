"""Cluster mode over the wire: three tierkv nodes, their slot map in a real
etcd, against redis-py's RedisCluster, redis-cli -c and redis-server.

The contract: a node serves exactly the slots the newest map gives it and
answers -MOVED (to the owner's address) for the others, -CROSSSLOT for keys
in more than one slot, with Redis Cluster's texts; with cluster mode off,
the CLUSTER family answers as a Redis without cluster support does."""
import random
import re
import subprocess
import time
import urllib.request

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from cluster_util import SLOTS, Etcd, even_owners, slot_map, wait_until
from conftest import free_port, reply_of


def test_cluster_commands_without_cluster_mode_match_redis(pair):
    for cmd in (["CLUSTER", "INFO"], ["CLUSTER", "KEYSLOT", "foo"], ["CLUSTER", "MYID"],
                ["ASKING"], ["READONLY"], ["READWRITE"]):
        pair.same(*cmd)
    assert pair.ours.info("cluster")["cluster_enabled"] == 0
    assert pair.theirs.info("cluster")["cluster_enabled"] == 0


@pytest.fixture
def cluster(make_tierkv):
    etcd = Etcd()
    nodes = [make_tierkv("--flash-size", "0", "--cluster-enabled", "yes",
                         "--cluster-etcd", etcd.endpoint, "--cluster-name", "t",
                         "--cluster-lease-ttl", "2", "--cluster-controller", "no")
             for _ in range(3)]
    ids = [n.client().execute_command("CLUSTER", "MYID").decode() for n in nodes]
    members = [(ids[i], "127.0.0.1", nodes[i].port) for i in range(3)]
    etcd.put("/tierkv/t/slotmap", slot_map(1, members, even_owners(3)))
    for n in nodes:
        wait_until(lambda: n.client().info("cluster").get("cluster_state") == "ok",
                   what="every node up with the map")
    yield etcd, nodes
    etcd.close()


def metrics_port(node):
    return int(node.client().config_get("metrics-port")["metrics-port"])


def owner_of(nodes, key):
    slot = nodes[0].client().execute_command("CLUSTER", "KEYSLOT", key)
    return nodes[min(slot * 3 // SLOTS, 2)], slot


def test_keyslot_matches_redis_in_cluster_mode(cluster, make_redis):
    _, nodes = cluster
    # The bus port is given: port + 10000 may pass 65535.
    theirs = make_redis("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                        "--cluster-port", str(free_port())).client()
    rng = random.Random(28)
    keys = ["foo", "bar", "", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap",
            "foo{bar}{zap}", "{chunk}:metadata", "{chunk}:kv_bytes"]
    keys += ["".join(rng.choice("ab{}:x") for _ in range(rng.randint(1, 12))) for _ in range(300)]
    ours = nodes[0].client()
    for k in keys:
        assert ours.execute_command("CLUSTER", "KEYSLOT", k) == \
            theirs.execute_command("CLUSTER", "KEYSLOT", k), k


def test_keys_in_slot_match_redis(cluster, make_redis):
    """COUNTKEYSINSLOT and GETKEYSINSLOT on each slot's owner answer as a
    one-node redis-server cluster holding the same keys, errors included."""
    _, nodes = cluster
    theirs = make_redis("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                        "--cluster-port", str(free_port())).client()
    theirs.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, SLOTS - 1)
    wait_until(lambda: b"cluster_state:ok" in theirs.execute_command("CLUSTER", "INFO"),
               what="redis-server's cluster up")
    keys = [f"{{t{i % 7}}}:{i}" for i in range(70)] + ["foo", "bar", "k:1", "k:2"]
    for k in keys:
        assert owner_of(nodes, k)[0].client().set(k, "v")
        assert theirs.set(k, "v")
    slots = {theirs.execute_command("CLUSTER", "KEYSLOT", k) for k in keys} | {0, SLOTS - 1}
    for slot in slots:
        ours = nodes[min(slot * 3 // SLOTS, 2)].client()
        assert ours.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == \
            theirs.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot), slot
        assert sorted(ours.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)) == \
            sorted(theirs.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)), slot
        assert len(ours.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 3)) == \
            len(theirs.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 3)), slot
    ours = nodes[0].client()
    for bad in (["COUNTKEYSINSLOT", "-1"], ["COUNTKEYSINSLOT", "16384"], ["COUNTKEYSINSLOT", "x"],
                ["GETKEYSINSLOT", "5", "-1"], ["GETKEYSINSLOT", "16384", "1"],
                ["GETKEYSINSLOT", "x", "1"], ["GETKEYSINSLOT", "1", "y"],
                ["COUNTKEYSINSLOT"], ["GETKEYSINSLOT", "1"]):
        assert reply_of(ours, "CLUSTER", *bad) == reply_of(theirs, "CLUSTER", *bad), bad


def test_each_node_serves_its_slots_and_moves_the_rest(cluster):
    _, nodes = cluster
    for i in range(60):
        key = f"key:{i}"
        owner, slot = owner_of(nodes, key)
        assert owner.client().set(key, f"v{i}")
        for n in nodes:
            if n is owner:
                assert n.client().get(key) == f"v{i}".encode()
                continue
            with pytest.raises(redis.ResponseError) as e:
                n.client().get(key)
            assert str(e.value) == f"MOVED {slot} 127.0.0.1:{owner.port}"
    assert sum(n.client().info("cluster")["cluster_moved"] for n in nodes) == 120
    body = urllib.request.urlopen(
        f"http://127.0.0.1:{metrics_port(nodes[0])}/metrics", timeout=5).read().decode()
    assert 'tierkv_cluster_refusals_total{reply="moved"}' in body
    # The figures INFO cluster shows, as gauges and counters.
    info = nodes[0].client().info("cluster")
    for name, value in (("tierkv_cluster_slot_map_version", info["cluster_slot_map_version"]),
                        ("tierkv_cluster_slots_owned", info["cluster_slots_owned"]),
                        ("tierkv_cluster_up", 1), ("tierkv_cluster_slots_migrating_out", 0),
                        ("tierkv_cluster_controller_leading", 0)):
        assert f"\n{name} {value}\n" in body, name
    assert 'tierkv_cluster_keys_migrated_total{direction="in"} 0' in body


@pytest.fixture
def redis_cluster(make_redis):
    """redis-server 7 in cluster mode: three masters, no replicas."""
    servers = [make_redis("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                          "--cluster-port", str(free_port())) for _ in range(3)]
    created = subprocess.run(["redis-cli", "--cluster", "create",
                              *[f"127.0.0.1:{s.port}" for s in servers],
                              "--cluster-replicas", "0", "--cluster-yes"],
                             capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stdout + created.stderr
    for s in servers:
        wait_until(lambda: b"cluster_state:ok" in s.client().execute_command("CLUSTER", "INFO"),
                   what="redis-server's cluster up")
    return servers


def owner_in(servers, key):
    """The redis-server of `redis_cluster` that owns `key`."""
    slot = servers[0].client().execute_command("CLUSTER", "KEYSLOT", key)
    for first, last, primary, *_ in servers[0].client().execute_command("CLUSTER", "SLOTS"):
        if first <= slot <= last:
            return next(s for s in servers if s.port == primary[1])


def test_crossslot_matches_a_three_master_redis_cluster(cluster, redis_cluster):
    """Multi-key commands and transactions over two slots, sent to the first
    key's owner, get the answers redis-server's cluster gives."""
    _, nodes = cluster
    commands = [["MGET", "{a}1", "{b}2"], ["MSET", "{a}1", "x", "{b}2", "y"],
                ["MSETNX", "{a}1", "x", "{b}2", "y"], ["DEL", "{a}1", "{b}2"],
                ["EXISTS", "{a}1", "{b}2"], ["RENAME", "{a}1", "{b}2"],
                ["RENAMENX", "{a}1", "{b}2"], ["COPY", "{a}1", "{b}2"], ["UNLINK", "{a}1", "{b}2"],
                ["TOUCH", "{a}1", "{b}2"], ["MGET", "{a}1", "{a}2"], ["DEL", "{a}1", "{a}2"]]
    ours, theirs = owner_of(nodes, "{a}")[0].client(), owner_in(redis_cluster, "{a}").client()
    for c in (ours, theirs):
        c.set("{a}1", "v")
    for cmd in commands:
        assert reply_of(ours, *cmd) == reply_of(theirs, *cmd), cmd
    # A transaction: the command that brings a second slot is refused when
    # queued, and EXEC then aborts.
    a_slot = theirs.execute_command("CLUSTER", "KEYSLOT", "{a}")
    def slot_of(key):
        return theirs.execute_command("CLUSTER", "KEYSLOT", key)
    near = next(f"{{t{i}}}" for i in range(1000) if 0 < abs(slot_of(f"{{t{i}}}") - a_slot) < 500)
    for script in ([["SET", "{a}x", "1"], ["SET", "{b}y", "1"]],
                   [["SET", "{a}x", "1"], ["SET", f"{near}y", "1"]],  # same node, two slots
                   [["SET", "{a}x", "1"], ["GET", "{a}y"]]):
        replies = []
        for c in (ours, theirs):
            conn = c.connection_pool.get_connection("MULTI")
            try:
                got = []
                for cmd in [["MULTI"], *script, ["EXEC"]]:
                    conn.send_command(*cmd)
                    try:
                        got.append(conn.read_response())
                    except redis.ResponseError as e:  # the owner's port differs
                        got.append(("error", re.sub(r"^(MOVED \d+) .*", r"\1", str(e))))
                replies.append(got)
            finally:
                c.connection_pool.release(conn)
        assert replies[0] == replies[1], script


def test_crossslot_and_hash_tags(cluster, make_redis):
    _, nodes = cluster
    owner, _ = owner_of(nodes, "{chunk7}")
    c = owner.client()
    assert c.mset({"{chunk7}:metadata": "m", "{chunk7}:kv_bytes": "kv"})
    assert c.mget("{chunk7}:metadata", "{chunk7}:kv_bytes") == [b"m", b"kv"]
    assert c.execute_command("TIER.EXISTS", "{chunk7}:metadata", "{chunk7}:kv_bytes",
                             "PREFETCH") == 2
    with pytest.raises(redis.ResponseError) as e:
        c.mset({"{chunk7}:a": "1", "{chunk8}:b": "2"})
    assert str(e.value) == "CROSSSLOT Keys in request don't hash to the same slot"
    with pytest.raises(redis.ResponseError) as e:
        c.execute_command("TIER.STREAM", "{chunk7}:a", "{chunk8}:b", "DEPTH", "2")
    assert str(e.value).startswith("CROSSSLOT")
    # A transaction whose commands touch two slots fails at EXEC.
    p = c.pipeline(transaction=True)
    p.set("{chunk7}:x", "1")
    p.set("{chunk8}:y", "1")
    with pytest.raises(redis.ResponseError) as e:
        p.execute()
    assert "CROSSSLOT" in str(e.value) or "MOVED" in str(e.value)


def test_preheat_lands_on_the_keys_owner(cluster):
    _, nodes = cluster
    owner, slot = owner_of(nodes, "foo")
    other = next(n for n in nodes if n is not owner)
    with pytest.raises(redis.ResponseError) as e:
        other.client().execute_command("TIER.PREHEAT", "foo", "file:///nonexistent")
    assert str(e.value) == f"MOVED {slot} 127.0.0.1:{owner.port}"
    with pytest.raises(redis.ResponseError) as e:
        other.client().execute_command("TIER.PREHEAT", "PREFIX", "p:", "file:///tmp/")
    assert "not available in cluster mode" in str(e.value)


def test_redis_py_cluster_client_runs_a_session(cluster):
    _, nodes = cluster
    rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", nodes[0].port)],
                      decode_responses=True)
    model = {}
    rng = random.Random(7)
    for i in range(400):
        key = f"k{rng.randrange(150)}"
        op = rng.random()
        if op < 0.5:
            model[key] = f"v{i}"
            assert rc.set(key, model[key])
        elif op < 0.8:
            assert rc.get(key) == model.get(key)
        else:
            assert rc.delete(key) == (1 if model.pop(key, None) is not None else 0)
    for key, value in model.items():
        owner, _ = owner_of(nodes, key)
        assert owner.client().get(key) == value.encode()
    rc.close()


def test_redis_cli_follows_redirects(cluster):
    _, nodes = cluster
    out = subprocess.run(["redis-cli", "-c", "-p", str(nodes[0].port), "SET", "foo", "bar"],
                         capture_output=True, text=True, timeout=10)
    assert out.stdout.strip() == "OK"
    out = subprocess.run(["redis-cli", "-c", "-p", str(nodes[2].port), "GET", "foo"],
                         capture_output=True, text=True, timeout=10)
    assert out.stdout.strip() == "bar"


def test_redis_benchmark_cluster_mode(cluster):
    """redis-benchmark --cluster finds the masters from CLUSTER NODES and
    sends each key to its owner: it ends without errors, and every node
    holds only keys of its own slots."""
    _, nodes = cluster
    run = subprocess.run(["redis-benchmark", "--cluster", "-h", "127.0.0.1", "-p",
                          str(nodes[0].port), "-t", "set,get", "-n", "3000", "-r", "1000", "-q"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SET:" in run.stdout and "GET:" in run.stdout, run.stdout
    assert "error" not in (run.stdout + run.stderr).lower(), run.stdout + run.stderr
    total = 0
    for n in nodes:
        keys = list(n.client().scan_iter(count=1000))
        total += len(keys)
        assert all(owner_of(nodes, k)[0] is n for k in keys)
    assert total > 100


def test_cluster_slots_nodes_and_info(cluster):
    _, nodes = cluster
    c = nodes[1].client()
    slots = c.execute_command("CLUSTER", "SLOTS")
    assert [(s[0], s[1], s[2][1]) for s in slots] == \
        [(0, 5461, nodes[0].port), (5462, 10922, nodes[1].port), (10923, 16383, nodes[2].port)]
    text = c.execute_command("CLUSTER", "NODES").decode()
    mine = [line for line in text.splitlines() if "myself" in line]
    assert len(mine) == 1 and mine[0].endswith("5462-10922")
    info = c.info("cluster")
    assert info["cluster_enabled"] == 1 and info["cluster_slots_owned"] == 5461
    assert info["cluster_slot_map_version"] == 1


def test_a_newer_map_moves_slots_and_an_older_one_is_ignored(cluster):
    etcd, nodes = cluster
    ids = [n.client().execute_command("CLUSTER", "MYID").decode() for n in nodes]
    members = [(ids[i], "127.0.0.1", nodes[i].port) for i in range(3)]
    everything_on_0 = [0] * SLOTS
    etcd.put("/tierkv/t/slotmap", slot_map(2, members, everything_on_0))
    wait_until(lambda: nodes[2].client().info("cluster")["cluster_slot_map_version"] == 2)
    owner_of_foo = nodes[0]
    with pytest.raises(redis.ResponseError) as e:
        nodes[2].client().get("foo")
    assert str(e.value) == f"MOVED 12182 127.0.0.1:{owner_of_foo.port}"
    etcd.put("/tierkv/t/slotmap", slot_map(1, members, even_owners(3)))  # older: ignored
    etcd.put("/tierkv/t/slotmap", slot_map(3, members, everything_on_0))
    wait_until(lambda: nodes[2].client().info("cluster")["cluster_slot_map_version"] == 3)


def test_etcd_down_means_clusterdown_then_recovery(cluster):
    etcd, nodes = cluster
    owner, _ = owner_of(nodes, "foo")
    assert owner.client().set("foo", "1")
    etcd.stop()
    wait_until(lambda: reply_of(owner.client(), "GET", "foo")
               == ("error", "CLUSTERDOWN The cluster is down"), timeout=10,
               what="-CLUSTERDOWN after the lease")
    etcd.start()
    wait_until(lambda: reply_of(owner.client(), "GET", "foo") == b"1", timeout=15,
               what="serving again once etcd is back")


def test_a_slot_that_comes_back_never_serves_its_old_keys(cluster):
    """A node that regains a slot drops what it kept of it: the writes made
    meanwhile went to another node, so its copy is older than theirs."""
    etcd, nodes = cluster
    ids = [n.client().execute_command("CLUSTER", "MYID").decode() for n in nodes]
    members = [(ids[i], "127.0.0.1", nodes[i].port) for i in range(3)]
    owners = even_owners(3)
    a, slot = owner_of(nodes, "foo")  # slot 12182: node 2
    b = nodes[0]
    assert a.client().set("foo", "old") and a.client().set("{foo}2", "old2")
    kept, _ = owner_of(nodes, "key:3")
    assert kept is a and a.client().set("key:3", "stays")  # another slot of node 2
    moved = list(owners)
    moved[slot] = 0
    etcd.put("/tierkv/t/slotmap", slot_map(2, members, moved))
    wait_until(lambda: reply_of(b.client(), "SET", "foo", "new") is True, what="slot on b")
    etcd.put("/tierkv/t/slotmap", slot_map(3, members, owners))  # back to a
    wait_until(lambda: a.client().info("cluster")["cluster_slot_map_version"] == 3)
    wait_until(lambda: not str(reply_of(a.client(), "GET", "foo")).startswith("('error', 'TRYAGAIN"),
               what="the purge to finish")
    assert a.client().get("foo") is None  # a miss, never "old"
    assert a.client().get("{foo}2") is None
    assert a.client().get("key:3") == b"stays"
    assert a.client().info("cluster")["cluster_keys_purged"] == 2


@pytest.fixture
def managed(make_tierkv):
    """Three nodes whose controller assigns the slots (no map by hand)."""
    etcd = Etcd()

    def start():
        return make_tierkv("--flash-size", "0", "--cluster-enabled", "yes",
                           "--cluster-etcd", etcd.endpoint, "--cluster-name", "m",
                           "--cluster-lease-ttl", "2")

    nodes = [start() for _ in range(3)]
    yield etcd, nodes, start
    etcd.close()


def owned(nodes):
    return [n.client().info("cluster").get("cluster_slots_owned", 0) for n in nodes]


def test_the_controller_assigns_slots_and_follows_deaths_and_joins(managed):
    etcd, nodes, start = managed
    wait_until(lambda: sum(owned(nodes)) == SLOTS and min(owned(nodes)) > 5000,
               what="an even split of every slot")
    leaders = [n.client().info("cluster")["cluster_controller"] for n in nodes]
    assert leaders.count("leading") == 1, leaders
    rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", nodes[0].port)],
                      decode_responses=True)
    for i in range(100):
        assert rc.set(f"k{i}", i)
    # kill -9: within the lease (2 s) and a controller round the survivors
    # own every slot; its keys are misses there, never wrong.
    victim = nodes.pop(2)
    victim.proc.kill()
    victim.proc.wait()
    start_time = time.time()
    wait_until(lambda: sum(owned(nodes)) == SLOTS, timeout=15, what="survivors own all")
    assert time.time() - start_time < 2 + 2 + 3  # TTL + 2 s, plus a poll's slack on a busy box
    rc.close()
    rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", nodes[0].port)],
                      decode_responses=True)
    for i in range(100):
        assert rc.get(f"k{i}") in (str(i), None)
    nodes.append(start())  # a fourth node joins and gets its share
    wait_until(lambda: min(owned(nodes)) > 5000 and sum(owned(nodes)) == SLOTS,
               what="the new node's share")
    rc.close()


@pytest.mark.parametrize("flags", [["--bind", "0.0.0.0"],
                                   ["--cluster-announce-host", "0.0.0.0"],
                                   ["--cluster-announce-host", "::"]])
def test_an_address_no_one_can_reach_is_refused(flags, tmp_path):
    """Every node bound to 0.0.0.0 would announce 0.0.0.0 and get the same
    id: the server refuses to start, with one line naming the key."""
    from conftest import TIERKV_SERVER
    run = subprocess.run([TIERKV_SERVER, "--port", str(free_port()), "--flash-size", "0",
                          "--metrics-port", "0", "--cluster-enabled", "yes", *flags],
                         capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert run.returncode != 0
    lines = (run.stderr + run.stdout).strip().splitlines()
    assert len(lines) == 1 and "announce" in lines[0], run.stderr + run.stdout


@pytest.fixture
def proxied(make_tierkv):
    """Starts one node owning every slot, reaching etcd through a TcpProxy,
    with a lease TTL of `ttl` s; maps by hand (no controller)."""
    from tcp_proxy import TcpProxy
    etcd = Etcd()
    proxy = TcpProxy(("127.0.0.1", etcd.client_port))

    def start(ttl):
        node = make_tierkv("--flash-size", "0", "--cluster-enabled", "yes",
                           "--cluster-etcd", proxy.endpoint, "--cluster-name", "p",
                           "--cluster-lease-ttl", str(ttl), "--cluster-controller", "no")
        node_id = node.client().execute_command("CLUSTER", "MYID").decode()

        def put_map(version):
            etcd.put("/tierkv/p/slotmap",
                     slot_map(version, [(node_id, "127.0.0.1", node.port)], [0] * SLOTS))

        put_map(1)
        wait_until(lambda: node.client().info("cluster")["cluster_state"] == "ok", what="up")
        return node, put_map

    yield proxy, start
    proxy.close()
    etcd.close()


def test_a_watch_on_a_silent_connection_ends_and_newer_maps_arrive(proxied):
    """The watch's connection stops carrying bytes, with no reset, while the
    lease renews on new connections (a TTL of 6 s outlasts a hung renewal):
    the node must not stay on its old map. A watch round lasts half a TTL."""
    proxy, start = proxied
    node, put_map = start(6)
    proxy.drop_existing()
    put_map(2)
    wait_until(lambda: node.client().info("cluster")["cluster_slot_map_version"] == 2,
               timeout=6 / 2 + 5, what="the newer map")
    assert node.client().info("cluster")["cluster_registrations"] == 1  # the lease held


def test_a_node_cut_off_from_etcd_comes_back_only_with_the_newest_map(proxied):
    """Cut off past its lease: CLUSTERDOWN within the TTL; a map written
    meanwhile is the first one it serves when it is back, never the old."""
    proxy, start = proxied
    node, put_map = start(2)
    proxy.drop_all(True)
    wait_until(lambda: node.client().info("cluster")["cluster_state"] != "ok", timeout=2 + 5,
               what="CLUSTERDOWN")
    put_map(5)
    time.sleep(2.5)  # past the lease at etcd too
    proxy.drop_all(False)
    deadline = time.time() + 20
    while True:
        info = node.client().info("cluster")
        if info["cluster_state"] == "ok":
            assert info["cluster_slot_map_version"] == 5, info
            break
        assert time.time() < deadline, "never back up"
        time.sleep(0.01)
