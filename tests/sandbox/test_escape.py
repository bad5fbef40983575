"""The escape suite: every attempt to get out of a sandbox must fail from inside (bwrap, and
Docker against the real dockerd with an image built locally; ``isolated`` runs each on both)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clawrig.sandbox.workspace import inject_gt
from clawrig.spec.task import FileContent, SourceRef, Task, TaskFormat, Workspace

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(
        __import__("shutil").which("bwrap") is None, reason="bubblewrap is not installed"
    ),
]
REPO = Path(__file__).resolve().parents[2]


async def test_host_files_outside_the_binds_are_invisible(make_sandbox, isolated):
    sb = await make_sandbox(isolated)
    assert Path("/etc/shadow").exists()
    r = await sb.exec("cat /etc/shadow")
    if isolated.startswith("bwrap"):
        assert r.exit_code != 0 and "No such file" in r.stderr
    else:  # the image's own /etc/shadow, never the host's
        assert Path("/etc/shadow").read_text() != r.stdout
    git_config = REPO / "pyproject.toml"  # a host file outside every bind (also in a worktree)
    assert git_config.exists()
    r = await sb.exec(f"cat {git_config}; ls {REPO}")
    assert r.exit_code != 0 and r.stdout == ""
    with pytest.raises(FileNotFoundError):
        await sb.read_file(str(git_config))


async def test_usr_is_read_only(make_sandbox):
    sb = await make_sandbox("bwrap")
    r = await sb.exec("touch /usr/bin/clawrig-pwned; echo x > /usr/lib/x")
    assert r.exit_code != 0 and "Read-only file system" in r.stderr
    assert not Path("/usr/bin/clawrig-pwned").exists()
    for cmd in (
        "mount -o remount,rw /usr",
        "mount -o remount,rw,bind /usr",
        "mount -o remount,rw,bind /tmp_workspace /usr",
    ):
        r = await sb.exec(cmd)
        assert r.exit_code != 0, cmd
    r = await sb.exec("touch /usr/bin/clawrig-pwned2")
    assert r.exit_code != 0 and not Path("/usr/bin/clawrig-pwned2").exists()
    caps = await sb.exec("grep CapEff /proc/self/status")
    assert caps.stdout.split()[-1] == "0000000000000000"


async def test_network_is_loopback_only(make_sandbox, isolated):
    # A server on the HOST's loopback: from inside, 127.0.0.1 is the sandbox's own loopback.
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    accepted: list[object] = []
    srv.settimeout(3)

    def accept() -> None:
        try:
            accepted.append(srv.accept())
        except OSError:
            pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    sb = await make_sandbox(isolated)
    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    r = await sb.exec(["python3", "-c", code])
    assert "CONNECTED" not in r.stdout and "refused" in r.stdout
    ifaces = await sb.exec("ls /sys/class/net 2>/dev/null || cat /proc/net/dev")
    assert "eth" not in ifaces.stdout and "lo" in ifaces.stdout
    # a service started inside is reachable from inside
    await sb.spawn(["python3", "-m", "http.server", "8765", "--bind", "127.0.0.1"])
    fetch = (
        "import time, urllib.request\n"
        "for _ in range(100):\n"
        "    try:\n"
        "        print(urllib.request.urlopen('http://127.0.0.1:8765/').status); break\n"
        "    except OSError:\n"
        "        time.sleep(0.05)\n"
    )
    r = await sb.exec(["python3", "-c", fetch])
    assert r.stdout.strip() == "200"
    srv.close()
    t.join(1)
    assert accepted == []


async def test_host_processes_are_invisible(make_sandbox, isolated):
    sb = await make_sandbox(isolated)
    me = os.getpid()
    r = await sb.exec(f"test -e /proc/{me}/cmdline && cat /proc/{me}/cmdline; ps -eo pid,args")
    assert "pytest" not in r.stdout
    pids = [int(line.split()[0]) for line in r.stdout.splitlines()[1:]]
    assert max(pids) < 1000 and 1 in pids  # a fresh PID namespace


async def test_harness_environment_does_not_leak(make_sandbox, monkeypatch, isolated):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-planted-secret-123")
    sb = await make_sandbox(isolated)
    r = await sb.exec("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")
    assert "sk-planted-secret-123" not in r.stdout
    assert "OPENROUTER_API_KEY" not in r.stdout


async def test_symlink_to_a_host_path_does_not_resolve_to_the_host(
    make_sandbox, tmp_path, isolated
):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST-ONLY-CONTENT")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(secret, ws / "link.txt")
    sb = await make_sandbox(isolated, workspace=ws)
    r = await sb.exec("cat /tmp_workspace/link.txt")
    assert "HOST-ONLY-CONTENT" not in r.stdout and r.exit_code != 0
    with pytest.raises(FileNotFoundError):
        await sb.read_file("/tmp_workspace/link.txt")
    out = tmp_path / "out"
    await sb.get_dir("/tmp_workspace", out)
    assert not (out / "link.txt").exists() or (out / "link.txt").is_symlink()


async def test_gt_is_unreadable_before_injection(make_sandbox, tmp_path, isolated):
    gt = tmp_path / "task" / "gt"
    gt.mkdir(parents=True)
    (gt / "answer.json").write_text('{"answer": "GT-MARKER-42"}')
    task = Task(
        id="t1",
        prompt="p",
        format=TaskFormat.WILDCLAW,
        source=SourceRef(path=tmp_path / "task.md"),
        workspace=Workspace(gt_dir=gt, gt_files={"inline.txt": FileContent(text="GT-INLINE")}),
    )
    sb = await make_sandbox(isolated)
    r = await sb.exec(
        "grep -rs GT-MARKER-42 / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr"
        " --exclude-dir=dev; ls /tmp_workspace"
    )
    assert "GT-MARKER-42" not in r.stdout
    # an agent process waiting to rewrite its result once gt/ appears must be dead by then
    await sb.spawn(
        "while [ ! -e /tmp_workspace/gt ]; do sleep 0.01; done; echo cheat > /tmp_workspace/r"
    )
    await sb.exec(
        "setsid sh -c 'while :; do sleep 0.01; [ -e /tmp_workspace/gt ] && "
        "echo cheat > /tmp_workspace/r2; done' > /dev/null 2>&1 &"
    )
    killed = await sb.kill_all()  # a trial grades in a fresh sandbox; here: killed first
    await inject_gt(sb, task)
    assert killed >= 2
    await asyncio.sleep(0.2)
    assert (await sb.read_file("/tmp_workspace/gt/answer.json")).decode().endswith('42"}')
    assert await sb.read_file("/tmp_workspace/gt/inline.txt") == b"GT-INLINE"
    ls = await sb.exec("ls /tmp_workspace")
    assert ls.stdout.split() == ["gt"]


def _host_processes_with(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                    found.append(int(name))
            except OSError:
                pass
    return found


async def test_daemonised_child_dies_with_stop(make_sandbox, isolated):
    sb = await make_sandbox(isolated)
    # sleeps tagged with this test's own number: the host scan must not see another run's
    tag = f"{os.getpid()}{time.monotonic_ns() % 10**6:06d}"
    one, two = f"4242.{tag}", f"4243.{tag}"
    # the command returns once both sleeps run: its shell returned as soon as it had forked
    # them, while setsid and nohup still exec'd their way to sleep, and a process between an
    # exec's new memory and its arguments shows an empty /proc/PID/cmdline (the host scan
    # missed one now and then, under load, at the sandbox's lower priority)
    await sb.exec(
        f"setsid nohup sleep {one} > /dev/null 2>&1 & (setsid sleep {two} &); "
        f"until pgrep -xf 'sleep {one}' && pgrep -xf 'sleep {two}'; do sleep 0.01; done",
        timeout_s=60,
    )
    assert _host_processes_with(one) and _host_processes_with(two)
    await sb.stop()
    for _ in range(100):
        if not _host_processes_with(one) and not _host_processes_with(two):
            break
        await asyncio.sleep(0.02)
    assert _host_processes_with(one) == [] and _host_processes_with(two) == []


async def test_no_process_of_the_agent_can_reach_the_harness_protocol(make_sandbox, isolated):
    # bwrap's init process (pid 1, dumpable, the agent's uid) held the supervisor's stdio,
    # the harness's pipes: a line written to /proc/1/fd/1 went into the harness's answers (a
    # forged answer, a line of gigabytes held in the harness's memory; here garbage, which
    # killed the sandbox) and /proc/1/fd/0 let the agent read or steal the harness's requests
    sb = await make_sandbox(isolated)
    r = await sb.exec(
        "for fd in 0 1 2; do [ -p /proc/1/fd/$fd ] && printf 'not json\\n' > /proc/1/fd/$fd "
        "2>/dev/null && echo wrote $fd; done; true"
    )
    after = await sb.exec("echo alive")
    assert after.stdout.strip() == "alive", (r.stdout, after)


async def test_a_flood_on_the_stderr_bwrap_init_holds_costs_the_harness_little(make_sandbox):
    # bwrap's init keeps its stderr, a pipe the harness drains: the agent writing to
    # /proc/1/fd/2 had the harness copy ~400 MB/s (two seconds of its CPU every five
    # seconds, per sandbox). Now the harness reads at most ~1.3 MB/s and the writer waits.
    # (With the zygote the sandbox's init is clawrig's, whose stderr is /dev/null:
    # tests/sandbox/test_zygote.py.)
    sb = await make_sandbox("bwrap-started")
    r = await sb.exec("timeout -s INT 3 dd if=/dev/zero of=/proc/1/fd/2 bs=64k 2>&1")
    # "N bytes (...) copied, ..."; only "R+P records out" when the INT cut dd's report short
    # (CI167), nothing when it came before dd had set its handler (a busy machine, the sandbox
    # niced: CI at -n 4), which it had not started writing by then
    said = re.search(r"^(\d+) bytes", r.stdout, re.M)
    records = re.search(r"^(\d+)\+(\d+) records out", r.stdout, re.M)
    copied = (
        int(said.group(1))
        if said
        else (int(records.group(1)) + int(records.group(2))) * 65536
        if records
        else 0
    )
    assert copied < 32 * 2**20, r.stdout
    assert (await sb.exec("echo alive")).stdout.strip() == "alive"


async def test_fork_bomb_is_contained(make_sandbox, isolated):
    sb = await make_sandbox(isolated, max_processes=64)
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    r = await sb.exec(["python3", "-c", bomb], timeout_s=2)
    assert r.timed_out
    # the host is fine: another sandbox starts and runs a command
    other = await make_sandbox(isolated)
    assert (await other.exec("echo ok")).stdout == "ok\n"
    left = await sb.exec("ls /proc | grep -c '^[0-9]'")
    assert int(left.stdout) < 10


async def test_a_sandbox_held_at_its_process_cap_refuses_commands_and_still_answers(
    make_sandbox, isolated
):
    """Processes that keep the sandbox at its cap leave the supervisor no thread for a new
    request: that request fails with EAGAIN, and the supervisor does not die (a dead one would
    end the trial as a sandbox fault the agent caused)."""
    import errno

    sb = await make_sandbox(isolated, max_processes=24)
    refill = (
        "import os, time\n"
        "while True:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(120)\n"
        "            os._exit(0)\n"
        "    except OSError:\n"
        "        time.sleep(0.005)\n"
    )
    await sb.spawn(["python3", "-c", refill])
    refused: list[OSError] = []
    for _ in range(200):
        try:
            await sb.exec("true", timeout_s=5)
        except OSError as exc:
            refused.append(exc)
            if len(refused) == 3:
                break
        await asyncio.sleep(0.02)
    assert [e.errno for e in refused] == [errno.EAGAIN] * 3


async def test_memory_limit_holds(make_sandbox, isolated):
    sb = await make_sandbox(isolated, memory_bytes=256 * 1024**2)
    r = await sb.exec(
        [
            "python3",
            "-c",
            "b = bytearray(600 * 1024**2); b[::4096] = b'x' * len(b[::4096]); print('ALLOCATED')",
        ]
    )
    assert r.exit_code != 0 and "ALLOCATED" not in r.stdout
    assert (await sb.exec("echo still-alive")).stdout == "still-alive\n"


async def test_file_size_limit_holds(make_sandbox, isolated):
    sb = await make_sandbox(isolated, max_file_bytes=1024**2)
    r = await sb.exec("head -c 3000000 /dev/zero > /tmp_workspace/big; echo $?")
    assert r.stdout.strip() != "0"
    size = len(await sb.read_file("/tmp_workspace/big"))
    assert size == 1024**2


async def test_root_inside_cannot_raise_its_limits(make_sandbox, isolated):
    sb = await make_sandbox(isolated, max_file_bytes=1024**2)
    code = (
        "import resource\n"
        "try:\n"
        "    resource.setrlimit(resource.RLIMIT_FSIZE, (2**40, 2**40)); print('RAISED')\n"
        "except (ValueError, OSError) as e:\n"
        "    print('denied')\n"
    )
    r = await sb.exec(["python3", "-c", code])
    assert r.stdout.strip() == "denied"
    assert (await sb.exec("id -u")).stdout.strip() == "0"
    r = await sb.exec("ls /sys/fs/cgroup 2>&1; echo 1 > /proc/sys/kernel/sysrq")
    assert r.exit_code != 0


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop applies when the harness is root")
async def test_unprivileged_uid_fallback_keeps_limits(tmp_path_factory):
    """Without cgroups (forced here), root drops the sandbox to a fresh unprivileged uid."""
    import tempfile

    from clawrig.sandbox import Limits, SandboxConfig
    from clawrig.sandbox.bwrap import BwrapSandbox

    ws = Path(tempfile.mkdtemp(prefix="clawrig-test-ws-"))
    os.chmod(ws, 0o755)
    sb = BwrapSandbox(SandboxConfig(workspace_dir=ws, limits=Limits(max_processes=32)))
    sb.force_uid_drop = True
    await sb.start()
    try:
        assert sb.host_uid is not None and sb.host_uid >= 200_000
        await sb.exec("echo hi > /tmp_workspace/made-inside")
        assert (ws / "made-inside").stat().st_uid == sb.host_uid
        assert (await sb.exec("id -u")).stdout.strip() == "0"
        r = await sb.exec(
            "for i in $(seq 60); do sleep 5 & done 2>&1; sleep 0.3; ls /proc | grep -c '^[0-9]'",
            timeout_s=5,
        )
        count = [ln for ln in r.stdout.split() if ln.isdigit()]
        assert not count or int(count[-1]) <= 34
    finally:
        await sb.stop()
        __import__("shutil").rmtree(ws, ignore_errors=True)


async def test_kernel_settings_are_read_only(make_sandbox):
    # a red-team finding: root inside is the host's uid 0 (uid_map "0 0 1" when the harness
    # is root), and the kernel lets the global uid 0 write any /proc/sys file with no
    # capability: kernel.core_pattern = "|/usr/bin/PROG ARGS" runs PROG as the host's root at
    # the next crash of any process. bwrap skips its read-only cover of /proc/sys there (the
    # /proc/sys folder is never writable to access(2), which it reads as "already read-only").
    # The probe writes back the value it read, so the host is unchanged even where it succeeds
    sb = await make_sandbox("bwrap")
    path = "/proc/sys/kernel/printk_ratelimit_burst"
    before = Path(path).read_text()
    r = await sb.exec(f"v=$(cat {path}) && echo $v > {path}")
    assert r.exit_code != 0 and "Read-only file system" in r.stderr, (r.exit_code, r.stderr)
    r = await sb.exec(f"cat {path} /proc/sys/kernel/core_pattern")  # still readable
    assert r.exit_code == 0 and r.stdout.split()[0] == before.strip()
    assert Path(path).read_text() == before


@pytest.mark.parametrize("kind", ["bwrap", "pooled"])
async def test_device_nodes_work_but_are_not_the_hosts(make_sandbox, kind):
    # a red-team finding: bwrap's --dev binds the host's own /dev nodes, which root inside
    # (the host's uid 0 when the harness is root) owns: `chmod 000 /dev/full` in a trial left
    # the host's /dev/full unusable. The probe sets the mode a node has already, so the host is
    # unchanged even where it succeeds. ``pooled``: a start through the mount template, whose
    # /dev holds the harness's own nodes for bwrap's --dev to bind (no binds over them)
    from clawrig.sandbox.mountns import template_devices
    from clawrig.sandbox.pool import pooling_possible

    if kind == "pooled" and not pooling_possible():
        pytest.skip("a warm pool needs root and mke2fs")
    sb = await make_sandbox(kind)
    host = {n: os.stat(f"/dev/{n}") for n in ("null", "zero", "full", "urandom")}
    r = await sb.exec(
        "echo x > /dev/null && head -c 3 /dev/zero | wc -c && head -c 4 /dev/urandom | wc -c"
    )
    assert r.exit_code == 0 and r.stdout.split() == ["3", "4"], (r.exit_code, r.stdout, r.stderr)
    r = await sb.exec("echo x > /dev/full")
    # /dev/full opens and refuses the write as the device does (ENOSPC), not permission
    assert r.exit_code != 0 and "Permission denied" not in r.stderr, r.stderr
    for name, st in host.items():
        mode = oct(stat.S_IMODE(st.st_mode))[2:]
        r = await sb.exec(f"chmod {mode} /dev/{name}")
        if os.geteuid() == 0:  # else the sandbox's root is no host uid 0: nothing to protect
            assert r.exit_code != 0 and "not permitted" in r.stderr, (name, r.stderr)
        after = os.stat(f"/dev/{name}")
        assert (after.st_mode, after.st_uid, after.st_mtime) == (st.st_mode, st.st_uid, st.st_mtime)
    if os.geteuid() == 0:  # the nodes are the harness's (DEV_OWNER: no uid of the sandbox's)
        r = await sb.exec("stat -c %u /dev/null /dev/zero /dev/full /dev/random /dev/tty")
        assert r.stdout.split() == ["65534"] * 5, r.stdout + r.stderr
        # through the template, bwrap's own bind of /dev/null is the harness's node; else
        # the harness's is bound over the host's
        mounts = (await sb.exec("cat /proc/self/mountinfo")).stdout
        from clawrig.sandbox.bwrap import device_nodes
        from clawrig.sandbox.mountns import template

        if kind == "pooled" and template() is not None and device_nodes() is not None:
            assert template_devices()  # (the template binds them wherever it can be made)
        stacked = 1 if kind == "pooled" and template_devices() else 2
        assert sum(" /dev/null " in line for line in mounts.splitlines()) == stacked, mounts


def test_device_nodes_are_made_beside_a_nodev_temp_folder(tmp_path):
    # a tmpfs /tmp is often mounted nodev (systemd's tmp.mount): nodes made there cannot be
    # opened, so device_nodes gave up and sandboxes bound the host's own nodes again (red
    # team). They are made in clawrig's cache folder then
    if os.geteuid() != 0:
        pytest.skip("device nodes are the harness's own only when it runs as root")
    nodev = tmp_path / "nodev"
    nodev.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "nodev,size=1m", "tmpfs", str(nodev)], check=True)
    probe = (
        "import os\n"
        "from clawrig.sandbox.bwrap import device_nodes\n"
        "folder = device_nodes()\n"
        "fd = os.open(folder / 'null', os.O_WRONLY)\n"
        "print(folder, os.write(fd, b'xyz'))\n"
    )
    env = dict(os.environ, TMPDIR=str(nodev), CLAWRIG_CACHE_DIR=str(tmp_path / "cache"))
    try:
        r = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
        )
    finally:
        subprocess.run(["umount", "-l", str(nodev)], check=False)
    assert r.returncode == 0, r.stderr[-1500:]
    folder, written = r.stdout.split()
    assert Path(folder).parent == tmp_path / "cache" / "dev" and written == "3"
    assert not Path(folder).exists()  # removed at the process's exit
