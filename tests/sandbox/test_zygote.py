"""The supervisor zygote (clawrig.sandbox.zygote): a bwrap sandbox's supervisor forked into the
sandbox by one process of the harness's, instead of an interpreter started in each. The
supervisor it forks must be what a started one is: in the sandbox's namespaces and cgroups,
with no capability, no host path in its command line, nothing of the harness's environment;
the sandbox's init it runs with (bwrap ``--as-pid-1``) must outlive the agent's kills and reap
its orphans; a killed supervisor is a dead sandbox, a killed zygote is started again, and a
sandbox that fails before its init is up fails its start with bwrap's reason. The escape
suite (test_escape.py) runs on sandboxes with and without the zygote."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
from pathlib import Path

import pytest

from clawrig.errors import SandboxError
from clawrig.sandbox import launchbin, zygote, zygote_program
from clawrig.sandbox.base import Bind
from clawrig.sandbox.client import SandboxDied

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(
        not zygote.zygote_usable("/usr/bin/python3"),
        reason="no zygote here (not root, no init program, no /usr/bin/python3 or no pid fds)",
    ),
]

NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts")


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _status(text: str) -> dict[str, str]:
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


async def test_the_supervisor_is_in_the_sandboxs_namespaces_and_cgroups(make_sandbox):
    sb = await make_sandbox("bwrap", memory_bytes=256 * 1024**2, max_processes=64)
    assert sb.zygote is True
    links = " ".join(f"/proc/{who}/ns/{ns}" for ns in NAMESPACES for who in (1, "self"))
    r = await sb.exec(f"readlink {links}")
    assert r.exit_code == 0, r.stderr
    inside = r.stdout.split()
    for i, ns in enumerate(NAMESPACES):  # the init's and a command's: the same
        assert inside[2 * i] == inside[2 * i + 1] and inside[2 * i].startswith(f"{ns}:[")
    # from the host: the supervisor (the zygote's child now) is in the init's namespaces,
    # which are not the host's
    init = _children(sb._proc.pid)
    assert len(init) == 1
    held = zygote._zygote[0]
    assert held is not None
    ours = [
        pid
        for pid in _children(held[0].pid)
        if os.readlink(f"/proc/{pid}/ns/pid") == os.readlink(f"/proc/{init[0]}/ns/pid")
    ]
    assert len(ours) == 1
    for ns in NAMESPACES:
        theirs = os.readlink(f"/proc/{init[0]}/ns/{ns}")
        assert os.readlink(f"/proc/{ours[0]}/ns/{ns}") == theirs
        if ns in ("mnt", "pid", "user", "net"):
            assert theirs != os.readlink(f"/proc/self/ns/{ns}")
    assert os.readlink(f"/proc/{ours[0]}/root") == "/"  # seen from the host: its own root
    assert (
        os.stat(f"/proc/{ours[0]}/root/tmp_workspace").st_ino
        == os.stat(sb.config.workspace_dir).st_ino
    )
    # the supervisor's cgroups are the sandbox's (the harness's cgroup per sandbox)
    r = await sb.exec("cat /proc/2/cgroup; echo --; cat /proc/self/cgroup")
    supervisor, command = r.stdout.split("--\n")
    assert supervisor.strip() == command.strip()
    assert sb.cgroup is not None and sb.cgroup.procs_files  # root: cgroups per sandbox
    for procs in sb.cgroup.procs_files:  # the host's view: the supervisor is in each
        assert str(ours[0]) in Path(procs).read_text().split()
    # the limits: a memory hog is killed, the supervisor lives on
    r = await sb.exec("python3 -c \"b = bytearray(600 * 1024 * 1024); print('no limit')\"")
    assert "no limit" not in r.stdout
    assert (await sb.exec("echo alive")).stdout == "alive\n"


async def test_the_supervisor_holds_no_capability_and_shows_no_host_path(make_sandbox):
    sb = await make_sandbox("bwrap")
    status = _status((await sb.exec("cat /proc/2/status")).stdout)
    for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[field], 16) == 0, field
    assert status["NoNewPrivs"] == "1"
    assert status["Groups"] == ""
    assert status["PPid"] == "0"  # its parent is the zygote, outside the sandbox
    r = await sb.exec("cat /proc/2/cmdline")
    assert r.stdout.split("\0") == ["/usr/bin/python3", "-I", "-S", "-", ""]
    # non-dumpable (as a started supervisor makes itself): its memory and descriptors closed
    r = await sb.exec("ls /proc/2/fd; cat /proc/2/environ")
    assert r.exit_code != 0 and "Permission denied" in r.stderr
    # root inside cannot get a capability back through an executable either
    r = await sb.exec("mount -t tmpfs none /tmp 2>&1; cat /proc/self/status")
    assert int(_status(r.stdout.split("\n", 1)[1])["CapEff"], 16) == 0
    assert "permission denied" in r.stdout.lower()


async def test_the_zygote_holds_nothing_of_the_harness(make_sandbox, monkeypatch):
    await make_sandbox("bwrap")
    held = zygote._zygote[0]
    assert held is not None
    pid = held[0].pid
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert sorted(e.split(b"=")[0] for e in environ if e) == [b"LANG", b"LC_ALL", b"PATH"]
    assert _status(Path(f"/proc/{pid}/status").read_text())["Groups"] == ""
    # no descriptor but stdio, its socket and its own PID namespace (no host folder, no
    # sandbox's pipe)
    fds = sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd"))
    assert fds[:3] == [0, 1, 2]
    held_open = sorted(os.readlink(f"/proc/{pid}/fd/{fd}").split(":")[0] for fd in fds[3:])
    assert held_open == ["pid", "socket"]


async def test_a_killed_zygote_is_started_again(make_sandbox):
    await make_sandbox("bwrap")
    held = zygote._zygote[0]
    assert held is not None
    os.kill(held[0].pid, signal.SIGKILL)
    held[0].wait(10)
    sb = await make_sandbox("bwrap")
    assert sb.zygote is True and (await sb.exec("echo up")).stdout == "up\n"
    again = zygote._zygote[0]
    assert again is not None and again[0].pid != held[0].pid


@pytest.fixture(params=["program", "perl"])
def init_name(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The sandbox's init: clawrig's sandbox program (compiled here: sandbox_launch.c), or
    perl where there is no C compiler; its name in /proc/1/comm."""
    if request.param == "perl":
        monkeypatch.setenv("CLAWRIG_LAUNCH_C", "0")
        return "perl"
    if launchbin.c_compiler() is None:
        pytest.skip("no C compiler here (make test installs Debian's gcc when root)")
    assert launchbin.program_fd() is not None  # a compiler and no program: a failure
    return "clawrig-init"


async def test_the_init_outlives_the_agent_and_reaps_its_orphans(make_sandbox, init_name):
    sb = await make_sandbox("bwrap")
    assert sb.zygote is True
    r = await sb.exec(
        "kill -9 1; kill -TERM 1; sleep 0.2; cat /proc/1/comm; ls /proc/1/fd; "
        "readlink /proc/1/fd/1 /proc/1/fd/2"
    )
    # signals from inside never reach the namespace's init; it holds no descriptor but its
    # stdio (the program's own, its arguments' pipe, the launcher's were closed), and its
    # stdout and stderr are /dev/null (not bwrap's pipes to the harness)
    assert r.stdout.split() == [init_name, "0", "1", "2", "/dev/null", "/dev/null"], r.stdout
    # orphans (their parents gone) become the init's children: reaped, no zombie left
    await sb.exec("sh -c '(sleep 0.2 &); (sleep 0.1 &); exit 0'")
    for _ in range(100):  # (a nice init on a busy machine reaps when it is scheduled)
        await asyncio.sleep(0.2)
        r = await sb.exec("grep -l '^State:.Z' /proc/[0-9]*/status; echo end")
        if r.stdout == "end\n":
            break
    assert r.stdout == "end\n", r.stdout
    # kill_all ends everything but the init and the supervisor: what it killed has exited (a
    # killed orphan may stay a zombie until the init is scheduled to reap it, as above)
    await sb.spawn("sleep 300")
    assert await sb.kill_all() >= 1
    # (the shell's glob is made before grep runs: the shell is listed, grep is not)
    r = await sb.exec("grep -H -E '^(Name|State):' /proc/[0-9]*/status")
    fields: dict[str, dict[str, str]] = {}
    for line in r.stdout.splitlines():
        path, key, value = line.split(":", 2)
        fields.setdefault(path, {})[key] = value.split()[0]
    alive = [f["Name"] for f in fields.values() if f["State"] not in ("Z", "X")]
    assert sorted(alive) == sorted([init_name, "python3", "sh"]), r.stdout


async def test_a_killed_supervisor_is_a_dead_sandbox(make_sandbox):
    sb = await make_sandbox("bwrap")
    with pytest.raises(SandboxDied):
        await asyncio.wait_for(sb.exec("kill -9 2; sleep 30"), 20)
    await asyncio.wait_for(sb.stop(), 20)
    assert sb._proc is not None and sb._proc.returncode is not None  # bwrap is gone too


async def test_a_sandbox_that_fails_before_its_init_is_up_says_why(make_sandbox, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    bind = Bind(source=gone, dest="/opt/data")
    gone.rmdir()  # bwrap cannot bind it: it fails before it runs the init
    with pytest.raises(SandboxError) as caught:
        await make_sandbox("bwrap", config={"binds": [bind]})
    assert "gone" in str(caught.value) or "No such file" in str(caught.value)


async def test_a_zygote_that_cannot_enter_gives_way_to_a_started_supervisor(
    make_sandbox, monkeypatch, caplog
):
    from clawrig.sandbox.bwrap import BwrapSandbox

    monkeypatch.setattr(zygote, "_broken", [False])
    asked = BwrapSandbox._zygote_request

    def unwritable(self, *args):  # a cap the kernel has no file for: the zygote's child fails
        request = asked(self, *args)
        request["caps"]["max_no_such_thing"] = 1
        return request

    monkeypatch.setattr(BwrapSandbox, "_zygote_request", unwritable)
    sb = await make_sandbox("bwrap")
    assert sb.zygote is False and zygote._broken == [True]
    assert (await sb.exec("echo up")).stdout == "up\n"
    r = await sb.exec("cat /proc/2/cmdline")  # started in the sandbox: bwrap's command
    assert "/opt/clawrig/supervisor.py" in r.stdout.split("\0")
    assert any(zygote_program.CANNOT_ENTER in rec.getMessage() for rec in caplog.records)
    assert "max_no_such_thing" in caplog.text
    later = await make_sandbox("bwrap")  # and so every later sandbox of the process
    assert later.zygote is False


SCAN_MEMORY = r"""
import re, sys
pattern, found = re.compile(sys.argv[1].encode()), set()
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
    for line in maps:
        fields = line.split()
        if "r" not in fields[1] or (len(fields) > 5 and fields[5].startswith("/")):
            continue  # the readable memory of its own, not a mapped file
        start, end = (int(x, 16) for x in fields[0].split("-"))
        try:
            mem.seek(start)
            found.update(m.group().decode() for m in pattern.finditer(mem.read(end - start)))
        except OSError:
            pass
print(" ".join(sorted(found)))
"""


async def test_no_sandbox_holds_another_sandboxs_environment(make_sandbox):
    """A trial's own variables (a lease's key) never pass through the zygote, whose memory
    (old requests too) every later supervisor, and every grader forked from one, inherits."""
    theirs, ours = (f"LEASE-TOKEN-{os.urandom(8).hex()}" for _ in range(2))
    a = await make_sandbox("bwrap", config={"env": {"OPENROUTER_API_KEY": theirs}})
    assert a.zygote is True
    assert (await a.exec("echo $OPENROUTER_API_KEY")).stdout == theirs + "\n"
    await a.stop()
    b = await make_sandbox("bwrap", config={"env": {"OPENROUTER_API_KEY": ours}})
    await b.write_file("/tmp_workspace/scan.py", SCAN_MEMORY)
    # as the clean room runs a grader (a fork of the supervisor): it finds its own sandbox's
    # key (the scan works), never the other's; the pattern does not match itself
    scan = ["python3", "-I", "-B", "/tmp_workspace/scan.py", "LEASE-TOKEN-[0-9a-f]{16}"]
    r = await b.exec(scan, fork_python=True)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split() == [ours]


async def test_starts_queued_on_a_full_zygote_all_go_on(make_sandbox):
    """Starts that wait for room in the zygote's queue each get it once the zygote reads
    again (each waiting sender's wake-up is its own), none hangs."""
    await make_sandbox("bwrap")
    held = zygote._zygote[0]
    assert held is not None
    proc, sock = held
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # room for a few requests
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        starts = [asyncio.create_task(make_sandbox("bwrap")) for _ in range(10)]
        await asyncio.sleep(1.5)  # the queue is full: the later starts wait for room
        assert not any(t.done() for t in starts)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    boxes = await asyncio.wait_for(asyncio.gather(*starts), 60)
    outs = await asyncio.gather(*(b.exec("echo ok") for b in boxes))
    assert [o.stdout for o in outs] == ["ok\n"] * 10


async def test_a_killed_supervisor_ends_the_sandbox_at_once(make_sandbox, tmp_path):
    """The agent's processes do not run on after the supervisor died (its sandbox's init
    outlives it with the zygote): bwrap is killed when the supervisor's answers end."""
    sb = await make_sandbox("bwrap")
    tick = Path(sb.config.workspace_dir) / "tick"
    await sb.exec("setsid sh -c 'while :; do echo t >> /tmp_workspace/tick; sleep 0.02; done' &")
    with pytest.raises(SandboxDied):
        await asyncio.wait_for(sb.exec("sleep 0.2; kill -9 2; sleep 30"), 20)
    await asyncio.wait_for(sb._proc.wait(), 10)  # bwrap ended without a stop()
    size = tick.stat().st_size
    await asyncio.sleep(0.5)
    assert size > 0 and tick.stat().st_size == size  # nothing writes any more


async def test_a_start_the_zygote_died_in_is_started_again(make_sandbox):
    await make_sandbox("bwrap")
    held = zygote._zygote[0]
    assert held is not None
    os.kill(held[0].pid, signal.SIGSTOP)
    start = asyncio.create_task(make_sandbox("bwrap"))
    await asyncio.sleep(1.0)  # its request waits in the stopped zygote's queue
    assert not start.done()
    os.kill(held[0].pid, signal.SIGKILL)
    sb = await asyncio.wait_for(start, 60)
    assert sb.zygote is True and (await sb.exec("echo up")).stdout == "up\n"
    again = zygote._zygote[0]
    assert again is not None and again[0].pid != held[0].pid


def _supervisor_pid(sb) -> int:
    """The host pid of ``sb``'s supervisor (the zygote's child in the init's namespace)."""
    held = zygote._zygote[0]
    assert held is not None
    init = _children(sb._proc.pid)[0]
    ns = os.readlink(f"/proc/{init}/ns/pid")
    ours = [p for p in _children(held[0].pid) if os.readlink(f"/proc/{p}/ns/pid") == ns]
    assert len(ours) == 1
    return ours[0]


async def test_a_start_stopped_after_its_greeting_is_not_started_again(make_sandbox, monkeypatch):
    """A start that failed after the supervisor greeted (its environment not taken: the
    sandbox is stopped) is not started again, even when the zygote died meanwhile."""
    from clawrig.sandbox.bwrap import BwrapSandbox
    from clawrig.sandbox.client import SupervisedSandbox

    await make_sandbox("bwrap")  # the zygote up
    after_start = BwrapSandbox._after_start

    async def stuck_and_orphaned(self):
        os.kill(_supervisor_pid(self), signal.SIGSTOP)  # adopt gets no answer
        held = zygote._zygote[0]
        os.kill(held[0].pid, signal.SIGKILL)
        held[0].wait(10)
        await after_start(self)

    monkeypatch.setattr(BwrapSandbox, "_after_start", stuck_and_orphaned)
    starts = SupervisedSandbox.starts
    with pytest.raises(SandboxError):
        await make_sandbox("bwrap", call_timeout_s=2, config={"env": {"KEY": "x"}})
    assert SupervisedSandbox.starts == starts + 1  # one launch, none after the stop
    monkeypatch.undo()
    assert (await make_sandbox("bwrap")).zygote is True  # a new zygote for the next


async def test_a_stuck_zygote_gives_way_to_started_supervisors(make_sandbox, monkeypatch, caplog):
    from clawrig.sandbox import client

    await make_sandbox("bwrap")
    held = zygote._zygote[0]
    assert held is not None
    monkeypatch.setattr(zygote, "_broken", [False])
    monkeypatch.setattr(client, "READY_TIMEOUT_S", 3.0)
    os.kill(held[0].pid, signal.SIGSTOP)  # it takes the request and forks nothing
    sb = await asyncio.wait_for(make_sandbox("bwrap"), 30)
    assert sb.zygote is False and (await sb.exec("echo up")).stdout == "up\n"
    assert zygote._broken == [True] and "forked no supervisor" in caplog.text
    assert held[0].wait(10) == -signal.SIGKILL  # killed, with the requests queued for it
    assert (await make_sandbox("bwrap")).zygote is False


async def test_a_forked_supervisor_gives_what_bwrap_gave(make_sandbox):
    """The trial's time zone reaches a forked grader, PWD an argv command, and the init (which
    the agent may read) holds no variable of the trial's."""
    sb = await make_sandbox("bwrap", config={"env": {"TZ": "Asia/Tokyo", "KEY": "secret-x"}})
    assert sb.zygote is True
    script = "import time; print(time.strftime('%Z'), time.timezone)"
    await sb.write_file("/tmp_workspace/tz.py", script)
    fork = await sb.exec(["python3", "-I", "-B", "/tmp_workspace/tz.py"], fork_python=True)
    fresh = await sb.exec(["python3", "-I", "-B", "/tmp_workspace/tz.py"])
    assert fork.stdout == fresh.stdout == "JST -32400\n", (fork, fresh)
    assert (await sb.exec(["printenv", "PWD"])).stdout == "/tmp_workspace\n"
    r = await sb.exec("tr '\\0' '\\n' < /proc/1/environ")
    assert "secret-x" not in r.stdout and "TZ=" not in r.stdout


async def test_what_a_sandbox_writes_to_its_init_s_stderr_is_shown_escaped(make_sandbox):
    # bwrap's own init (a supervisor started in the sandbox) holds bwrap's stderr: what the
    # agent writes there ends the supervisor's death message, its escape sequences shown as
    # text, not sent to a terminal
    sb = await make_sandbox("bwrap-started")
    assert sb.zygote is False
    with pytest.raises(SandboxDied) as caught:
        await asyncio.wait_for(
            sb.exec(r"printf 'disk full \033[31mRED\033]0;x\007' > /proc/1/fd/2; kill -9 -1"), 20
        )
    text = str(caught.value)
    assert "disk full \\x1b[31mRED\\x1b]0;x\\x07" in text and "\x1b" not in text, text


async def test_a_harness_stopped_with_its_sandboxes_is_no_stopped_supervisor(make_sandbox):
    """helper-161: a whole job stopped (SIGSTOP) and continued, as a batch scheduler suspends
    one, ran the harness a moment before its sandboxes: the stop check, overdue, found the
    supervisor still stopped and scored an honest trial 0. A check that runs late judges
    nothing, and a stop must be seen twice on time; a supervisor that stays stopped is still
    found (tests/integrity/test_abstention.py). Here the harness's loop stalls 7 s (as a stopped
    harness's does) while the supervisor is stopped, and the supervisor goes on 0.3 s after
    the loop does."""
    import time

    sb = await make_sandbox("bwrap")
    assert not sb._supervisor_stopped()  # (finds the supervisor's host pid)
    supervisor = sb._supervisor_pid
    assert supervisor is not None
    loop = asyncio.get_running_loop()

    def suspended() -> None:
        os.kill(supervisor, signal.SIGSTOP)
        time.sleep(7)  # the harness stopped too: its timers fall due meanwhile
        loop.call_later(0.3, os.kill, supervisor, signal.SIGCONT)

    loop.call_later(1.0, suspended)
    r = await sb.exec("sleep 9; echo done")
    assert (r.exit_code, r.stdout) == (0, "done\n")
