"""tierkv-server's command line (--version, --help, bad flags) and the files
in packaging/: the example configuration loads, and a server started from
it with every line uncommented runs with the defaults."""
import os
import re
import subprocess

from conftest import ROOT, TIERKV_SERVER, start_tierkv

EXAMPLE = os.path.join(ROOT, "packaging", "tierkv.toml")


def run(*args):
    return subprocess.run([TIERKV_SERVER, *args], capture_output=True, text=True, timeout=30)


def test_version_prints_and_exits_zero():
    p = run("--version")
    assert p.returncode == 0
    assert re.fullmatch(r"tierkv-server \d+\.\d+\.\d+ \(Redis 7\.0\.\d+ compatible\)\n", p.stdout)


def test_help_shows_units():
    p = run("--help")
    assert p.returncode == 0
    assert "--memory" in p.stdout and "(default 1gb)" in p.stdout
    assert "(default 2s)" in p.stdout  # offload-wait-ms
    assert "1073741824" not in p.stdout


def test_bad_flags_exit_nonzero_with_one_line():
    for args in (("--bogus",), ("--memory", "lots"), ("--lease-ttl-ms", "10x")):
        p = run(*args)
        assert p.returncode != 0, args
        assert len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)


def test_example_config_is_what_the_server_prints():
    with open(EXAMPLE) as f:
        assert f.read() == run("--print-example-config").stdout


def test_server_runs_from_the_uncommented_example(tmp_path):
    lines = []
    with open(EXAMPLE) as f:
        for line in f:
            m = re.match(r"# ([a-z0-9-]+) = (.*)$", line)
            if m:
                lines.append(f"{m.group(1)} = {m.group(2)}\n")
    assert len(lines) > 40
    config = tmp_path / "tierkv.toml"
    config.write_text("".join(lines))
    # The flags override the file (ports, a small memory-only store).
    s = start_tierkv(str(tmp_path), ("--config", str(config), "--flash-size", "0"))
    try:
        c = s.client()
        assert c.config_get("lease-ttl-ms") == {"lease-ttl-ms": "10000"}
        assert c.config_get("slowlog-max-len") == {"slowlog-max-len": "128"}
        assert c.set("k", "v") and c.get("k") == b"v"
    finally:
        s.stop()
