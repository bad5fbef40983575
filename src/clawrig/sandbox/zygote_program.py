"""clawrig's supervisor zygote: one Python process per harness that forks a bwrap sandbox's
supervisor into the sandbox, instead of a new interpreter started in every sandbox (~10 ms of
CPU each, two sandboxes per trial). Standard library only; run by the sandboxes' own python3
(``python3 -I -S -`` reading this program, then a call of :func:`main`, on its stdin:
the supervisors it forks show that command line to the sandbox, no host path; the harness's
side is :mod:`clawrig.sandbox.zygote`).

Each message on the socket asks for one supervisor, once the sandbox is set up (its init, the
namespace's pid 1 under ``bwrap --as-pid-1``, has said so to the harness): a JSON object
(``outer``: the host pid of the sandbox's bwrap; ``procs``: cgroup.procs files to join;
``fsize``: RLIMIT_FSIZE in bytes, 0 for none; ``nice``: steps nicer; ``cwd``; ``env``: the
defaults only, never a trial's own variables, which the harness sends the supervisor itself:
this process's memory, old requests too, is every later supervisor's; ``caps``:
``/proc/sys/user`` values for the sandbox's user namespace; ``source``: the supervisor's path
inside) with four descriptors: the supervisor's requests (read end), answers and stderr (write
ends), and bwrap's pid descriptor. Nothing is answered on the socket: the supervisor greets
the harness on its answers pipe as a started one does, and a failure is one line on its stderr
pipe, whose end the harness then reads (as a failed bwrap's).

Per request the zygote finds the init (bwrap's only child) and forks the supervisor straight
into the init's PID namespace (pid 2 there: setns(2) of this process's children's namespace,
set back after the fork). The child joins the sandbox's cgroups, sets the limits bwrap's
launcher sets (no core dumps, RLIMIT_FSIZE, priority), enters the init's mount, cgroup, IPC,
UTS and network namespaces and last its user namespace (setns on a pid file descriptor: as
the host's root, before it holds capabilities only inside), writes the inotify caps there
(through the host's /proc, held open: the sandbox's /proc/sys is read-only) and takes the
init's root as its own (``chroot``). It then starts a session, drops every capability
(bounding, ambient, effective, permitted, inheritable), sets no_new_privs, takes its stdio
from the three pipes and closes every other descriptor, takes the sandbox's environment and
working folder, and runs :func:`clawrig.sandbox.supervisor.main` as a started one would. It
dies with the sandbox: the kernel kills every process of a PID namespace whose init ends.

The zygote holds no secret to leak into a sandbox: it starts with a near-empty environment,
clears its supplementary groups, and never sees a request but these. It dies with its harness
(``PR_SET_PDEATHSIG``) and ends at its socket's end. Sources: setns(2) (pid file descriptors,
Linux 5.8+), capabilities(7), prctl(2), bwrap(1) (``--as-pid-1``).
"""

import _signal
import _socket
import ctypes
import gc
import marshal
import posix as os
import resource
import select
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SIGKILL = 9
"""Linux's numbers (sched.h, prctl.h, capability.h, signal.h)."""

_libc = ctypes.CDLL(None, use_errno=True)

CANNOT_ENTER = "the supervisor's zygote could not enter the sandbox"
"""How a failure of the zygote's own part begins on the sandbox's stderr (the harness then
starts the supervisor in the sandbox, :mod:`clawrig.sandbox.zygote`)."""


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s: %s" % (what, os.strerror(err)))


def _setns(fd, flags, what):
    _check(_libc.setns(fd, flags), "setns(%s)" % what)


def _prctl(option, arg, what):
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), "prctl(%s)" % what)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_CAP_LAST = []  # type: list[int]
"""The kernel's highest capability number, read once by :func:`main` (the same for every
sandbox; a lookup in /proc/sys per supervisor cost more the more sandboxes were alive)."""


def _drop_capabilities():
    """No capability left in any set, none to be had again (bwrap's ``--cap-drop ALL``), and
    no_new_privs (bwrap sets it too)."""
    for cap in range(_CAP_LAST[0] + 1):
        _prctl(PR_CAPBSET_DROP, cap, "PR_CAPBSET_DROP")
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "prctl(PR_CAP_AMBIENT)")
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _prctl(PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")


def _init_of(outer):
    """The host pid of bwrap's child (the sandbox's init) under bwrap's host pid ``outer``."""
    with open("/proc/%d/task/%d/children" % (outer, outer), "rb") as fh:
        children = fh.read().split()
    if len(children) != 1:
        raise OSError("bwrap (pid %d) has %d children, not its init" % (outer, len(children)))
    return int(children[0])


def _parent_of(pid):
    with open("/proc/%d/stat" % pid, "rb") as fh:
        data = fh.read()
    return int(data[data.rindex(b")") + 2 :].split()[1])


def _write_caps(proc, caps):
    """Write ``caps`` (``/proc/sys/user`` name: value) in this process's user namespace (the
    sandbox's, entered already), through ``proc``: a descriptor of the host's /proc (the
    sandbox's /proc/sys is read-only), opened before this process left the host's mount
    namespace. The files are looked up now, in this user namespace: its own values."""
    for name, value in caps.items():
        fd = os.open("sys/user/" + name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=proc)
        try:
            text = ("%d\n" % value).encode()
            if os.write(fd, text) != len(text):
                raise OSError("short write to /proc/sys/user/" + name)
        finally:
            os.close(fd)


def _supervisor(req, fds, supervisor_main):
    """The supervisor's own set-up (module docs), in the sandbox's namespaces; never returns."""
    req_r, ans_w, err_w = fds[:3]
    os.setsid()
    os.dup2(req_r, 0)
    os.dup2(ans_w, 1)
    os.dup2(err_w, 2)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    _drop_capabilities()
    env = {k.encode(): v.encode() for k, v in req["env"].items()}
    for key in list(os.environ):
        os.unsetenv(key)
    os.environ.clear()
    for key, value in env.items():
        os.putenv(key, value)
    os.environ.update(env)
    time.tzset()  # the C library's time zone from this environment, not the zygote's
    try:
        os.chdir(req["cwd"])
    except OSError:
        os.chdir("/")
    sys.argv = [req["source"]]
    gc.enable()  # the zygote's own objects are frozen: never visited (nor copied) by it
    supervisor_main([])
    os._exit(0)  # pragma: no cover - main ends the process


def _enter(req, fds, pidfd, root, supervisor_main):
    """The forked child's work (module docs), in the sandbox's PID namespace already (pid 2):
    ``pidfd`` and ``root``: the sandbox's init's pid descriptor and root folder. Never
    returns."""
    err_w = fds[2]
    try:
        _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)  # the supervisor waits for its own
        pid = str(os.getpid()).encode()  # the host's pid: this process's /proc is the host's
        for path in req["procs"]:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if req["fsize"]:
            resource.setrlimit(resource.RLIMIT_FSIZE, (req["fsize"], req["fsize"]))
        os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + req["nice"])
        proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        flags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET
        _setns(pidfd, flags, "mount, cgroup, ipc, uts, net")
        _setns(pidfd, CLONE_NEWUSER, "user")
        if req["caps"]:
            _write_caps(proc, req["caps"])
        os.close(proc)
        os.fchdir(root)
        os.chroot(".")
        os.close(root)
        os.close(pidfd)
    except BaseException as exc:
        message = "clawrig: %s: %s\n" % (CANNOT_ENTER, exc)
        try:
            os.write(err_w, message.encode("utf-8", "replace"))
        except OSError:
            pass
        os._exit(1)
    _supervisor(req, fds, supervisor_main)


def _alive(pidfd):
    """True while ``pidfd``'s process has not exited (its descriptor polls readable then)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return not poller.poll(0)


def _fork_into(req, fds, own_pid_ns, supervisor_main):
    """Fork the supervisor for ``req`` into the sandbox's PID namespace (this process's
    children's namespace set to the init's for the fork, then back to ``own_pid_ns``).
    ``fds[3]``: bwrap's pid descriptor: while bwrap lives its pid is its own, so the init
    found under that pid (and checked after its descriptor was opened) is this sandbox's."""
    outer = req["outer"]
    init = _init_of(outer)
    pidfd = os.pidfd_open(init)
    try:
        root = os.open("/proc/%d/root" % init, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if not _alive(fds[3]) or _parent_of(init) != outer or not _alive(pidfd):
                raise OSError("the sandbox ended before its supervisor was forked")
            _setns(pidfd, CLONE_NEWPID, "pid")
            try:
                child = os.fork()
                if child == 0:
                    _enter(req, fds, pidfd, root, supervisor_main)
            finally:
                _setns(own_pid_ns, CLONE_NEWPID, "pid (back)")
        finally:
            os.close(root)
    finally:
        os.close(pidfd)


def _receive(sock):
    """One request and its four descriptors, or None at the socket's end."""
    data, ancillary, _flags, _addr = sock.recvmsg(1 << 20, _socket.CMSG_SPACE(4 * 4))
    if not data:
        return None
    fds = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % 4
            fds += [int.from_bytes(payload[i : i + 4], sys.byteorder) for i in range(0, usable, 4)]
    return data, fds


def main(source, pyc, sock_fd):
    """Serve requests on the ``SOCK_SEQPACKET`` socket ``sock_fd`` until its end, forking
    supervisors whose code is ``pyc`` (precompiled, may be empty) or else ``source``."""
    _prctl(PR_SET_PDEATHSIG, SIGKILL, "PR_SET_PDEATHSIG")
    if os.getppid() == 1:  # the harness is gone already
        os._exit(0)
    os.setgroups([])
    data = b""
    if pyc:
        with open(pyc, "rb") as fh:
            data = fh.read()
    magic = getattr(sys.modules.get("_frozen_importlib_external"), "MAGIC_NUMBER", b"?")
    if data[:4] == magic:
        code = marshal.loads(memoryview(data)[16:])
    else:
        with open(source, "rb") as fh:
            code = compile(fh.read(), source, "exec")
    namespace = {"__name__": "clawrig_supervisor", "__file__": source}
    exec(code, namespace)
    supervisor_main = namespace["main"]
    loads = namespace["_loads"]
    _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)  # the forked children reap themselves
    own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    with open("/proc/sys/kernel/cap_last_cap", "rb") as fh:
        _CAP_LAST.append(int(fh.read()))
    sock = _socket.socket(fileno=sock_fd)
    gc.disable()
    gc.freeze()  # what the supervisors inherit is never visited by their collector: not copied
    while True:
        got = _receive(sock)
        if got is None:
            os._exit(0)
        data, fds = got
        try:
            req = loads(data.decode("utf-8"))
            if len(fds) != 4:
                raise ValueError("%d descriptors, not 4" % len(fds))
            _fork_into(req, fds, own_pid_ns, supervisor_main)
        except (ValueError, OSError, KeyError) as exc:  # said on the sandbox's stderr
            if len(fds) == 4:
                try:
                    os.write(fds[2], ("clawrig: %s: %s\n" % (CANNOT_ENTER, exc)).encode())
                except OSError:
                    pass
        for fd in fds:
            os.close(fd)
