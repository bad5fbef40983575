"""clawrig's in-sandbox supervisor: a small process server, standard library only.

It runs as the sandbox's main process (pid 2 under bubblewrap's init, or forked there by the
harness's zygote, :mod:`clawrig.sandbox.zygote`, which calls :func:`main`) and executes every
command of a trial, so a tool call costs a fork/exec instead of a new sandbox, and background
processes survive between calls.

Protocol (one JSON object per line, on stdin/stdout):
    request  {"id": int, "op": str, ...args}
    response {"id": int, "ok": true, ...result} | {"id": int, "ok": false,
              "error": {"type": "FileNotFoundError" | ..., "message": str}}
Binary payloads are base64 strings. Requests are served concurrently (a thread each).

Ops: ping, exec, spawn, poll, log, write, kill, read_file, write_file, list, tar_out, tar_in,
kill_all, adopt, forward, unforward, shutdown. See ``clawrig.sandbox.client`` for the
client side.

``forward`` listens on the sandbox's ``127.0.0.1:<port>`` and pipes each TCP connection, byte
for byte, to a unix socket inside (the model gateway's door, the egress proxy: bound read-only
from the host). One thread of this process serves every forward and connection with a selector,
so a sandbox's way out costs no interpreter of its own; it understands nothing of HTTP and
reaches nothing but that socket. At most ``max_connections`` connections per forward are piped
at once (more are closed at once), so a sandbox's programs cannot exhaust this process's file
descriptors. ``unforward`` closes the listener and its connections.

``exec`` with ``fork_python`` runs ``[python3, "-I", "-B", SCRIPT, ARGS...]`` as a fork of this
process when that python3 is this very interpreter, or a virtual environment's python of it
(:func:`_fork_python`: the grader's runner in the clean room, on the system's python3 or a
grading environment). Commands start with ``posix_spawn`` (:func:`_spawn`).

Run it with ``python3 -I -S supervisor.py [--root-map FROM=TO ...]`` (the backends start it
through :data:`clawrig.sandbox.client.SUPERVISOR_BOOT`, its code precompiled);
``--root-map`` (LocalSandbox only) translates in-sandbox path prefixes to host folders for file
operations and cwd.
"""

import _thread
import binascii
import errno
import posix as os  # os's C functions; os.py itself imports _collections_abc, posixpath, stat
import select
import sys
import time

try:  # CPython's C modules: neither ``re`` nor ``enum`` (collections, json, signal pull them in)
    from _collections import deque
except ImportError:  # pragma: no cover - another Python
    from collections import deque

# Start-up is what every sandbox pays (two per trial: the agent's and the clean room), so only
# C modules are imported before "ready": json's decoder, subprocess (locale), signal and
# threading pull in re, enum and collections, 3x the interpreter's own start. Not even os: its
# C functions are posix's, and the few of os.py's that the requests use are the _path helpers
# below (os.py costs as much as the rest of a supervisor's own start); a forked Python
# (fork_python: the grader's runner) imports it before the fork, as its site import would.
# base64 and tarfile wait for the requests that need them; the code itself comes precompiled
# (:data:`clawrig.sandbox.client.SUPERVISOR_BOOT`).

SIGKILL = 9
SIGPIPE = 13
SIGXFSZ = 25
"""Linux signal numbers (``signal`` imports enum)."""
DEVNULL = "/dev/null"
DEFPATH = "/bin:/usr/bin"
"""``os.devnull`` and ``os.defpath`` (POSIX)."""
S_IFMT = 0o170000
S_IFDIR = 0o040000
S_IFREG = 0o100000
"""File type bits of ``st_mode`` (``stat``)."""


def _environ():
    """The process's environment as str (``os.environ``: the file system encoding, undecodable
    bytes kept as surrogates), from posix's bytes."""
    enc = sys.getfilesystemencoding()
    return {
        k.decode(enc, "surrogateescape"): v.decode(enc, "surrogateescape")
        for k, v in os.environ.items()
    }


def _path_type(path):
    """The file type bits of ``path`` (symlinks followed), None when it cannot be stat'ed
    (``os.path.isdir`` and ``isfile`` compare them)."""
    try:
        return os.stat(path).st_mode & S_IFMT
    except (OSError, ValueError):
        return None


def _path_join(folder, name):
    """``os.path.join(folder, name)`` for a relative ``name``."""
    return folder + name if not folder or folder.endswith("/") else folder + "/" + name


def _path_dirname(path):
    """``os.path.dirname(path)``."""
    head = path[: path.rfind("/") + 1]
    return head.rstrip("/") or head


def _makedirs(path):
    """``os.makedirs(path, exist_ok=True)``: ``path`` and each missing folder above it, made
    with mode 0777 (less the umask). Raises FileExistsError when ``path`` is not a folder,
    OSError."""
    try:
        os.mkdir(path)
    except FileNotFoundError:
        parent = _path_dirname(path.rstrip("/"))
        if not parent or parent == path:
            raise
        _makedirs(parent)
        try:
            os.mkdir(path)
        except FileExistsError:
            if _path_type(path) != S_IFDIR:
                raise
    except FileExistsError:
        if _path_type(path) != S_IFDIR:
            raise


def _json_codec():
    """(loads, dumps, dumps_result): the protocol's lines, read and written with json's own C
    scanner and encoder (json's package imports re and enum, more than the interpreter's own
    start), or json where this Python has no ``_json``; ``dumps_result`` writes what
    ``json.dumps(obj, default=str)`` writes (the same C encoder json.dumps uses, ASCII, a
    circular reference refused), for a forked grader's runner (``sys.clawrig_json``)."""
    try:
        import _json

        class Context:  # what the C scanner reads (json.decoder.JSONDecoder's attributes)
            strict = True
            object_hook = None
            object_pairs_hook = None
            parse_float = float
            parse_int = int
            parse_constant = {
                "NaN": float("nan"),
                "Infinity": float("inf"),
                "-Infinity": float("-inf"),
            }.__getitem__
            memo = {}  # type: dict

        scan = _json.make_scanner(Context())

        def default(obj):
            raise TypeError("not JSON serializable: %s" % type(obj).__name__)

        encode = _json.make_encoder(
            None, default, _json.encode_basestring, None, ": ", ", ", False, False, True
        )

        def loads(text):
            try:
                obj, end = scan(text, 0)
            except StopIteration:
                raise ValueError("not a JSON value") from None
            if end != len(text):
                raise ValueError("extra data after a JSON value")
            return obj

        def dumps(obj):
            return "".join(encode(obj, 0))

        def dumps_result(obj):
            markers = {}  # type: dict
            ascii = _json.encode_basestring_ascii
            return "".join(
                _json.make_encoder(markers, str, ascii, None, ": ", ", ", False, False, True)(
                    obj, 0
                )
            )

        return loads, dumps, dumps_result
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - another Python
        import json

        return (
            json.loads,
            lambda obj: json.dumps(obj, ensure_ascii=False),
            lambda obj: json.dumps(obj, default=str),
        )


_loads, _dumps, _dumps_result = _json_codec()


class _Event:
    """threading.Event on a bare lock (threading imports collections and more)."""

    def __init__(self):
        self._flag = False
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def set(self):
        if not self._flag:
            self._flag = True
            try:
                self._lock.release()
            except RuntimeError:  # set twice at once: released already
                pass

    def is_set(self):
        return self._flag

    def wait(self, timeout=None):
        if self._flag:
            return True
        if self._lock.acquire(True, -1 if timeout is None else max(timeout, 0)):
            self._lock.release()
        return self._flag


def _b64decode(text):
    return binascii.a2b_base64(text) if text else b""


def _b64encode(data):
    return binascii.b2a_base64(data, newline=False).decode("ascii")


MARKER = "CLAWRIG_CMD"
_out_lock = _thread.allocate_lock()
_procs = {}  # type: dict
_procs_lock = _thread.allocate_lock()
_running = {}  # type: dict
"""exec request id -> (Popen, marker), so a cancel op can kill it."""
_next_proc = [0]
_root_map = []  # type: list
_log_dir = _environ().get("CLAWRIG_LOG_DIR", "/run/clawrig")
_base_env = {}  # type: dict
_local = [False]


def _send(obj):
    line = _dumps(obj) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def _host(path):
    """Translate an in-sandbox path for LocalSandbox (identity under bwrap/docker)."""
    if not path:
        return path
    for src, dst in _root_map:
        if path == src or path.startswith(src.rstrip("/") + "/"):
            return dst + path[len(src.rstrip("/")) :]
    return path


class _Capture:
    """Collects a stream keeping at most ``limit`` bytes: the head and the tail."""

    def __init__(self, limit):
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = deque()
        self.tail_len = 0
        self.total = 0
        self.omitted = 0
        """Bytes :meth:`result` left out (its note says so in the text too)."""

    def feed(self, chunk):
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail.append(chunk)
            self.tail_len += len(chunk)
            while self.tail and self.tail_len - len(self.tail[0]) >= self.half:
                self.tail_len -= len(self.tail.popleft())

    def result(self):
        tail = b"".join(self.tail)
        if self.total <= len(self.head) + len(tail) and self.total <= 2 * self.half:
            return bytes(self.head) + tail, False
        tail = tail[-self.half :]
        omitted = self.omitted = self.total - len(self.head) - len(tail)
        return bytes(self.head) + _note(omitted) + tail, True


def _note(omitted):
    """The note put where output was cut (the harness's ``truncation_note``, the same)."""
    return (
        "\n[... %d bytes omitted: output truncated, head and tail kept ...]\n" % omitted
    ).encode()


DRAIN_S = 1.0
"""Seconds, at most, output is still taken once its command ended."""
MAX_TIMEOUT_S = 1_000_000.0
"""Seconds: a command's time limit above this is cut to it (poll(2) takes at most 2**31 - 1
milliseconds; a trial never lasts this long)."""


def _timeout_s(value):
    """A command's time limit from a request: None (none), or a float in (0, MAX_TIMEOUT_S].
    Raises ValueError for anything else (NaN, infinity, <= 0), before the command starts."""
    if value is None:
        return None
    t = float(value)
    if not 0 < t < float("inf"):
        raise ValueError("timeout must be a finite number of seconds > 0, not %r" % value)
    return min(t, MAX_TIMEOUT_S)


CHUNK = 65536


def _collect(child, pipes, timeout, marker):
    """Wait for ``child`` (a :class:`_Child`) while reading its output pipes into their
    captures, in this thread (no reader threads: each one cost a thread start per command):
    ``pipes`` is a list of (descriptor, :class:`_Capture`), each closed here. Past ``timeout``
    seconds (None: no limit) the command's whole tree is killed (:func:`_kill_tree`). Returns
    (timed out, ``time.monotonic()`` when it ended). Once the command ended, what the pipes
    hold is read to its end (all the command wrote), and reading stops when they are empty (a
    background process of the command's may hold them open; what it writes later is not the
    command's output), within DRAIN_S."""
    open_fds = {fd: cap for fd, cap in pipes}
    poller = select.poll()
    for fd in open_fds:
        poller.register(fd, select.POLLIN)
    pidfd = child._fd
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    end = None if timeout is None else time.monotonic() + max(timeout, 0)
    timed_out = False
    delay = 0.0005  # without pid descriptors: how long until the child is polled again

    def read(fd):
        try:
            chunk = os.read(fd, CHUNK)
        except OSError:
            chunk = b""
        if chunk:
            open_fds[fd].feed(chunk)
            return True
        poller.unregister(fd)
        del open_fds[fd]
        _close(fd)
        return False

    try:
        while child.returncode is None:
            wait = None if end is None else (end - time.monotonic()) * 1000
            if pidfd is None:
                wait = delay * 1000 if wait is None else min(wait, delay * 1000)
                delay = min(delay * 2, 0.05)
            if wait is not None and wait <= 0:
                if end is not None and time.monotonic() >= end:
                    timed_out = True
                    if pidfd is not None:
                        poller.unregister(pidfd)
                        pidfd = None
                    _kill_tree(child.pid, marker)
                    child.wait()
                    break
                wait = 0
            for fd, _ in poller.poll(wait):
                if fd == pidfd:
                    poller.unregister(pidfd)
                    pidfd = None  # reaped below: its descriptor is closed then
                    child._reap(0)
                elif fd in open_fds:
                    read(fd)
            if pidfd is None and child.returncode is None:
                child.poll()
        ended = time.monotonic()
        until = ended + DRAIN_S
        while open_fds and time.monotonic() < until:
            ready = [fd for fd, _ in poller.poll(0) if fd in open_fds]
            if not ready:
                break
            for fd in ready:
                read(fd)
    finally:
        for fd in list(open_fds):
            _close(fd)
    return timed_out, ended


def _env(extra, marker=None):
    env = dict(_base_env)
    if extra:
        env.update({str(k): str(v) for k, v in extra.items()})
    if marker:
        env[MARKER] = marker
    return env


def _argv(cmd):
    return ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)


def _pids():
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            out.append(int(name))
    return out


def _proc_stat(pid):
    """(ppid, session) of a live process; None for one that is gone or a zombie (dead, only
    waiting to be reaped: killing it again is pointless and waiting for it never ends)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            data = fh.read()
        rest = data[data.rindex(b")") + 2 :].split()
        if rest[0] in (b"Z", b"X"):
            return None
        return int(rest[1]), int(rest[3])  # ppid, session
    except (OSError, ValueError, IndexError):
        return None


def _pidfds(pids):
    """Pid file descriptors of ``pids`` (those still there), opened before they are killed so
    each names that very process; None where this Python or kernel has none (< 3.9, < 5.3)."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    fds = []
    for pid in pids:
        try:
            fds.append(opener(pid))
        except OSError as exc:
            if exc.errno in (errno.ENOSYS, errno.EPERM):
                _close(*fds)
                return None
    return fds


KILL_WAIT_S = 1.0
"""Longest a kill (:func:`_kill_tree`, ``kill_all``) waits for its processes to be gone (one
stuck in the kernel, in uninterruptible sleep, cannot die sooner); then it gives up."""


def _wait_exited(fds, round_no, end):
    """Wait until every process of ``fds`` (from :func:`_pidfds`) has exited: a pid file
    descriptor polls readable then, so this returns as soon as the last one is gone, no
    rounds of sleeps, or at ``end`` (``time.monotonic()``). Without pid file descriptors
    (``fds`` None): a pause of 0.25 ms doubling to 8 ms per round. Closes ``fds``."""
    if fds is None:
        time.sleep(min(0.00025 * (2**round_no), 0.008))
        return
    import select

    try:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        left = len(fds)
        while left > 0:
            wait_ms = (end - time.monotonic()) * 1000
            if wait_ms <= 0:
                break
            for fd, _ in poller.poll(wait_ms):
                poller.unregister(fd)
                left -= 1
    finally:
        _close(*fds)


def _marker_of(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as fh:
            for item in fh.read().split(b"\0"):
                if item.startswith(MARKER.encode() + b"="):
                    return item[len(MARKER) + 1 :].decode("ascii", "replace")
    except OSError:
        pass
    return None


def _has_marker(pid, marker):
    return _marker_of(pid) == marker


def _kill_tree(root_pid, marker):
    """Kill the command's process group, its session, its descendants and every process that
    still carries its marker (daemonised grandchildren), repeating until none is left."""
    me = os.getpid()
    end = time.monotonic() + KILL_WAIT_S
    for round_no in range(40):
        if round_no and time.monotonic() > end:
            return
        try:
            os.killpg(root_pid, SIGKILL)
        except OSError:
            pass
        stats = {}
        for pid in _pids():
            if pid in (1, me):
                continue
            st = _proc_stat(pid)
            if st:
                stats[pid] = st
        doomed = {pid for pid, (_pp, sid) in stats.items() if sid == root_pid}
        doomed |= {pid for pid in stats if marker and _has_marker(pid, marker)}
        frontier = {root_pid} | doomed
        while frontier:
            children = {pid for pid, (pp, _s) in stats.items() if pp in frontier} - doomed
            doomed |= children
            frontier = children
        if not doomed:
            return
        fds = _pidfds(doomed)
        for pid in doomed:
            try:
                os.kill(pid, SIGKILL)
            except OSError:
                pass
        _wait_exited(fds, round_no, end)


def op_ping(req):
    return {"pid": os.getpid()}


_devnull = []  # type: list


def _null_fd():
    """A descriptor of /dev/null (opened once) for a command's stdin."""
    if not _devnull:
        _devnull.append(os.open(DEVNULL, os.O_RDWR | os.O_CLOEXEC))
    return _devnull[0]


def _which(name, env):
    """The program ``name`` runs: itself when it names a path, else the first executable file
    of that name on the command's own PATH (as subprocess looks it up). Raises
    FileNotFoundError."""
    if "/" in name:
        return name
    for folder in (env.get("PATH") or DEFPATH).split(":"):
        path = _path_join(folder or ".", name)
        if _path_type(path) == S_IFREG and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(errno.ENOENT, "No such file or directory", name)


_CD = 'cd -- "$0" && exec "$@"'
"""The shell line that enters a command's cwd, when it is not the supervisor's own (posix_spawn
has no chdir before Python 3.13); the program then replaces the shell (same pid)."""


def _exit_code(status):
    if hasattr(os, "waitstatus_to_exitcode"):
        return os.waitstatus_to_exitcode(status)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


class _Child:
    """A started command: its pid, its return code once reaped (negative: killed by that
    signal, as subprocess says), ``stdin`` (a pipe's writing end, or None). Waits on a pid file
    descriptor (no polling) where the kernel has them."""

    def __init__(self, pid, stdin=None):
        self.pid = pid
        self.stdin = stdin
        self.returncode = None
        self.popen = None
        self._lock = _thread.allocate_lock()
        self._fd = None
        try:
            self._fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pass

    def _reap(self, flags):
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, flags)
                except ChildProcessError:
                    pid, status = self.pid, 255 << 8
                if pid == self.pid:
                    self.returncode = _exit_code(status)
                    if self._fd is not None:
                        _close(self._fd)
                        self._fd = None
            return self.returncode

    def poll(self):
        return self._reap(os.WNOHANG)

    def wait(self, timeout=None):
        """Wait until the command exits (at most ``timeout`` seconds); True when it has."""
        if self.returncode is not None:
            return True
        fd = self._fd
        if fd is not None:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            try:
                ready = poller.poll(None if timeout is None else max(timeout, 0) * 1000)
            except (OSError, ValueError):  # closed by another waiter meanwhile
                ready = True
            if not ready:
                return self.poll() is not None
            return self._reap(0) is not None
        end = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return True


def _spawn(cmd, cwd, env, stdin_fd, stdout_fd, stderr_fd, stdin=None):
    """Start ``cmd`` (str: under /bin/sh -c) in a session of its own with ``stdin_fd``,
    ``stdout_fd`` and ``stderr_fd`` as its 0, 1 and 2, SIGPIPE and SIGXFSZ at their defaults
    (as subprocess does) and only those descriptors (every other is close-on-exec). Returns a
    :class:`_Child`. Raises FileNotFoundError (no such program or cwd) or OSError."""
    argv = _argv(cmd)
    if not argv:
        raise ValueError("empty command")
    exe = _which(argv[0], env)
    if cwd is not None and cwd != os.getcwd():
        kind = _path_type(cwd)
        if kind != S_IFDIR:
            cls = NotADirectoryError if kind is not None else FileNotFoundError
            code = errno.ENOTDIR if kind is not None else errno.ENOENT
            raise cls(code, os.strerror(code), cwd)
        argv, exe = ["/bin/sh", "-c", _CD, cwd, exe] + argv[1:], "/bin/sh"
    if not hasattr(os, "posix_spawn"):  # pragma: no cover - Python < 3.8
        import subprocess

        p = subprocess.Popen(
            argv,
            executable=exe,
            cwd=cwd,
            env=env,
            stdin=stdin_fd,
            stdout=stdout_fd,
            stderr=stderr_fd,
            start_new_session=True,
            close_fds=True,
        )
        child = _Child(p.pid, stdin)
        child.popen = p  # held: a dropped Popen would reap the child behind our back
        return child
    actions = [
        (os.POSIX_SPAWN_DUP2, stdin_fd, 0),
        (os.POSIX_SPAWN_DUP2, stdout_fd, 1),
        (os.POSIX_SPAWN_DUP2, stderr_fd, 2),
    ]
    pid = os.posix_spawn(
        exe, argv, env, file_actions=actions, setsid=True, setsigdef=(SIGPIPE, SIGXFSZ)
    )
    return _Child(pid, stdin)


_kept = []  # type: list
"""The supervisor's own stdio objects in a forked Python child: never used, flushed or freed
there (another thread of the supervisor may have held their locks at the fork)."""


def _python_fork_target(argv, env):
    """``(script, args, venv)`` when ``argv`` is ``[PYTHON, "-I", "-B", SCRIPT, ARGS...]`` and
    PYTHON, looked up on the command's PATH, runs this very interpreter: its path (``venv``
    None), or a virtual environment's python whose file resolves to this interpreter's
    (``venv``: that path; a ``pyvenv.cfg`` beside it or one folder up, as the site module
    finds one: the grading environments of :mod:`clawrig.sandbox.pyenv`); else None (another
    program, or a link to this one that is no environment: started afresh)."""
    if not isinstance(argv, list) or len(argv) < 4 or argv[1:3] != ["-I", "-B"]:
        return None
    try:
        exe = _which(argv[0], env)
    except OSError:
        return None
    import os as os_py  # its Python part too: the forked child's site import uses it

    path = os_py.path
    if path.abspath(exe) == path.abspath(sys.executable):
        return argv[3], list(argv[4:]), None
    exe_dir = path.dirname(path.abspath(exe))
    if path.realpath(exe) != path.realpath(sys.executable) or not any(
        _path_type(path.join(folder, "pyvenv.cfg")) == S_IFREG
        for folder in (exe_dir, path.dirname(exe_dir))
    ):
        return None
    return argv[3], list(argv[4:]), path.abspath(exe)


def _fork_python(script, args, venv, cwd, env, stdin_fd, stdout_fd, stderr_fd):
    """Run ``python3 -I -B SCRIPT ARGS...`` as a fork of this process instead of a new
    interpreter (the grader's runner in the clean room, :mod:`clawrig.grading.programmatic`):
    the child is what that command would be (its own session, cwd, environment, stdio on the
    given descriptors and no other, ``sys.argv``, a fresh ``__main__``, the site packages and
    their .pth files, bytecode not written, SIGPIPE ignored as Python does) without the
    interpreter's start. ``venv``: the path of a virtual environment's python that resolves to
    this interpreter (:func:`_python_fork_target`); the child is that command: its
    ``sys.executable``, and the site import finds the environment's ``pyvenv.cfg`` from it
    (``sys.prefix``, the environment's site packages and not the system's when it says so),
    as that interpreter's own start would. Its exit code is the script's (1 for an uncaught
    exception, traceback on stderr). Returns a :class:`_Child`. Raises FileNotFoundError (no
    such cwd)."""
    if cwd is not None and _path_type(cwd) != S_IFDIR:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", cwd)
    if sys.version_info >= (3, 12):  # its warning about forking with threads: not for us
        try:
            import _warnings

            _warnings.filters.insert(0, ("ignore", None, DeprecationWarning, None, 0))
        except (ImportError, AttributeError):  # pragma: no cover - another Python
            pass
    import gc

    # this process's objects left out of the child's collections (gc.freeze's own use): a
    # collection writes to every object it visits, so each page of them would be copied
    gc.freeze()
    try:
        with _out_lock:  # no answer half-written by another thread in the child's copy
            pid = os.fork()
    except BaseException:
        gc.unfreeze()
        raise
    if pid:
        gc.unfreeze()  # the supervisor collects its own as before; the child's stay frozen
        return _Child(pid)
    code = 1
    try:
        os.setsid()
        os.dup2(stdin_fd, 0)
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        try:  # every other descriptor: the protocol's pipes, other commands' pipes
            fds = [int(name) for name in os.listdir("/proc/self/fd")]
        except OSError:  # pragma: no cover - no /proc
            fds = list(range(3, os.sysconf("SC_OPEN_MAX")))
        for fd in fds:
            if fd > 2:
                _close(fd)
        if cwd is not None:
            os.chdir(cwd)
        import os as os_py  # imported already (_python_fork_target)

        # the command's environment, changed where it differs from this process's (os.environ
        # and the C one: unsetenv, putenv): clearing and refilling it wrote to every page of
        # its strings, each a page copied from the supervisor (~0.6 ms of the child's CPU)
        environ = os_py.environ
        for key in [k for k in environ if k not in env]:
            del environ[key]
        for key, value in env.items():
            if environ.get(key) != value:
                environ[key] = value
        if env.get("TZ") != _start_tz[0]:  # the C library read TZ when this process began
            time.tzset()
        _kept.extend((sys.stdin, sys.stdout, sys.stderr))
        enc, errs = sys.stdout.encoding, sys.stdout.errors
        streams = (
            open(0, encoding=enc, errors=errs, closefd=False),
            open(1, "w", encoding=enc, errors=errs, closefd=False),
            open(2, "w", encoding=enc, errors="backslashreplace", closefd=False, buffering=1),
        )
        for fd, name in enumerate(("stdin", "stdout", "stderr")):
            stream = streams[fd]
            setattr(sys, name, stream)
            setattr(sys, "__%s__" % name, stream)
        sys.argv = [script] + args
        sys.dont_write_bytecode = True
        sys.clawrig_not_dumpable = _protected[0]
        sys.clawrig_json = (_loads, _dumps_result)
        main = type(sys)("__main__")
        main.__file__ = script
        main.__builtins__ = __builtins__
        sys.modules["__main__"] = main
        if venv is not None:  # site.venv() reads pyvenv.cfg beside sys.executable
            sys.executable = venv
        import site

        site.main()
        with open(script, "rb") as fh:
            source = fh.read()
        try:
            exec(compile(source, script, "exec"), main.__dict__)
            code = 0
        except SystemExit as exc:
            code = exc.code
            if code is None:
                code = 0
            elif not isinstance(code, int):
                sys.stderr.write("%s\n" % (code,))
                code = 1
        except BaseException:
            etype, value, tb = sys.exc_info()
            tb = tb.tb_next if tb is not None else tb  # the traceback from the script on
            sys.excepthook(etype, value.with_traceback(tb), tb)
            code = 1
        if "threading" in sys.modules:  # as at an interpreter's exit: its threads, atexit
            sys.modules["threading"]._shutdown()
        import atexit

        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - the child's own failure, said on its stderr
        try:
            sys.excepthook(*sys.exc_info())
        except BaseException:  # noqa: BLE001
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        os._exit(code & 0xFF if isinstance(code, int) else 1)


def _start_thread(target, *args):
    """Start a daemon thread; a sandbox at its process cap (threads count against it) gives
    OSError(EAGAIN) for this request instead of ending the supervisor."""
    try:
        _thread.start_new_thread(target, args)
    except RuntimeError:
        raise OSError(errno.EAGAIN, "the sandbox's process limit is reached") from None


def _close(*fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def op_exec(req):
    marker = "%d-%d" % (os.getpid(), req["id"])
    limit = int(req.get("limit") or 262144)
    merge = bool(req.get("merge"))
    stdin_data = _b64decode(req["stdin"]) if req.get("stdin") is not None else None
    timeout = _timeout_s(req.get("timeout"))
    start = time.monotonic()
    out_cap, err_cap = _Capture(limit), _Capture(limit)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe() if not merge else (-1, -1)
    in_r, in_w = os.pipe() if stdin_data is not None else (-1, -1)
    if stdin_data is not None:

        def feed():
            try:
                with open(in_w, "wb") as w:
                    w.write(stdin_data)
            except OSError:
                pass

        try:
            _start_thread(feed)
        except OSError:
            _close(out_r, out_w, err_r, err_w, in_r, in_w)
            raise
    env = _env(req.get("env"), marker)
    fork = _python_fork_target(req["cmd"], env) if req.get("fork_python") else None
    try:
        start_fn = _spawn if fork is None else _fork_python
        p = start_fn(
            *((req["cmd"],) if fork is None else fork),
            _host(req.get("cwd")) or None,
            env,
            in_r if stdin_data is not None else _null_fd(),
            out_w,
            out_w if merge else err_w,
        )
    except BaseException as exc:
        _close(out_r, err_r)
        if not isinstance(exc, FileNotFoundError):
            raise
        return {
            "exit_code": 127,
            "stdout": "",
            "stderr": str(exc),
            "timed_out": False,
            "truncated": False,
            "duration": 0.0,
        }
    finally:  # the child holds its own copies (or never started): its output ends at its EOF
        _close(out_w, err_w, in_r)
    with _procs_lock:
        _running[req["id"]] = (p, marker)
    pipes = [(out_r, out_cap)] + ([(err_r, err_cap)] if not merge else [])
    try:
        timed_out, ended = _collect(p, pipes, timeout, marker)
    except BaseException:
        _kill_tree(p.pid, marker)  # an answer that is an error leaves nothing running
        p.wait()
        raise
    finally:
        with _procs_lock:
            _running.pop(req["id"], None)
    duration = ended - start
    out, t1 = out_cap.result()
    err, t2 = err_cap.result()
    code = 124 if timed_out else p.returncode
    if code is not None and code < 0:
        code = 128 - code
    return {
        "exit_code": code,
        "stdout": out.decode("utf-8", "replace"),
        "stderr": err.decode("utf-8", "replace"),
        "timed_out": timed_out,
        "truncated": t1 or t2,
        "omitted": [c.omitted for c in (out_cap, err_cap) if c.omitted],
        "duration": duration,
    }


def op_cancel(req):
    """Kill a running exec (the caller stopped waiting for it): its whole tree."""
    with _procs_lock:
        entry = _running.get(req.get("target"))
    if entry is None:
        return {"cancelled": False}
    p, marker = entry
    _kill_tree(p.pid, marker)
    return {"cancelled": True}


def op_spawn(req):
    _makedirs(_log_dir)
    with _procs_lock:
        _next_proc[0] += 1
        hid = "p%d" % _next_proc[0]
    log_path = _path_join(_log_dir, hid + ".log")
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    in_r, in_w = os.pipe()
    try:
        p = _spawn(
            req["cmd"],
            _host(req.get("cwd")) or None,
            _env(req.get("env"), "%d-bg-%s" % (os.getpid(), hid)),
            in_r,
            log,
            log,
            stdin=open(in_w, "wb"),
        )
    except BaseException:
        _close(in_w)
        raise
    finally:
        _close(log, in_r)
    with _procs_lock:
        _procs[hid] = (p, log_path)
    return {"handle": hid, "pid": p.pid}


def _proc(req):
    try:
        return _procs[req["handle"]]
    except KeyError:
        raise KeyError("no such process handle: %s" % req.get("handle")) from None


def op_poll(req):
    p, _ = _proc(req)
    code = p.poll()
    if code is not None and code < 0:
        code = 128 - code
    return {"exit_code": code}


LOG_CAP = 4 * 1024 * 1024
"""Largest log answer (bytes) per call: a process writing gigabytes must not flood us."""


def op_log(req):
    """The log from ``offset``: at most ``limit`` bytes (and :data:`LOG_CAP`); with ``ends``,
    its head and tail within that many when it is longer, the note between them as a
    command's capture has it, and ``omitted`` its count (the log's end, not the bytes at the
    cap: a background command's 100 MB read as its first 4 MiB, helper-201)."""
    _, path = _proc(req)
    offset = int(req.get("offset") or 0)
    limit = req.get("limit")
    budget = min(int(limit), LOG_CAP) if limit is not None else LOG_CAP
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        half = max(budget // 2, 1)
        if req.get("ends") and size - offset > 2 * half:
            fh.seek(offset)
            head = fh.read(half)
            fh.seek(size - half)
            tail = fh.read(half)
            omitted = size - offset - len(head) - len(tail)
            data = head + _note(omitted) + tail
            return {"data": data.decode("utf-8", "replace"), "next": size, "omitted": [omitted]}
        fh.seek(offset)
        data = fh.read(budget)
    return {"data": data.decode("utf-8", "replace"), "next": offset + len(data), "omitted": []}


def op_write(req):
    p, _ = _proc(req)
    if p.stdin is None or p.stdin.closed:
        raise BrokenPipeError("stdin of %s is closed" % req["handle"])
    p.stdin.write(_b64decode(req.get("data") or ""))
    p.stdin.flush()
    if req.get("eof"):
        p.stdin.close()
    return {}


def op_kill(req):
    p, _ = _proc(req)
    _kill_tree(p.pid, "%d-bg-%s" % (os.getpid(), req["handle"]))
    p.wait(5)
    return {"exit_code": p.returncode}


TAR_CAP = 256 * 1024 * 1024
"""Largest total of file bytes one tar_out carries; files past it are left out (listed)."""
READ_CAP = 256 * 1024 * 1024
"""Largest read_file answer (bytes) when the caller sets no max_bytes."""


def _open_regular(path, flags, mode=0o644):
    """Open without blocking and refuse anything but a regular file: a FIFO, a device or a
    socket planted where the harness reads or writes must not hang or flood it."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        kind = os.fstat(fd).st_mode & S_IFMT
        if kind == S_IFDIR:
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        if kind != S_IFREG:
            raise OSError(errno.EINVAL, "not a regular file", path)
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def op_read_file(req):
    path = _host(req["path"])
    max_bytes = req.get("max_bytes")
    limit = int(max_bytes) if max_bytes is not None else READ_CAP
    with open(_open_regular(path, os.O_RDONLY), "rb") as fh:
        data = fh.read(limit)
    return {"data": _b64encode(data)}


def op_write_file(req):
    path = _host(req["path"])
    parent = _path_dirname(path)
    if parent:
        _makedirs(parent)
    fd = _open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with open(fd, "wb") as fh:
        fh.write(_b64decode(req["data"]))
    if req.get("mode") is not None:
        os.chmod(path, int(req["mode"]))
    return {}


def op_list(req):
    path = _host(req["path"])
    entries = []
    with os.scandir(path) as it:
        for e in it:
            if e.is_symlink():
                kind, size = "link", 0
            elif e.is_dir():
                kind, size = "dir", 0
            elif e.is_file():
                kind, size = "file", e.stat().st_size
            else:
                kind, size = "other", 0
            entries.append({"name": e.name, "kind": kind, "size": size})
    entries.sort(key=lambda x: x["name"])
    return {"entries": entries}


def op_tar_out(req):
    import io
    import tarfile

    path = _host(req["path"])
    if _path_type(path) != S_IFDIR:
        raise FileNotFoundError("no such directory: %s" % req["path"])
    cap = int(req.get("max_bytes") or TAR_CAP)
    total = [0]
    skipped = []

    def within_cap(info):
        if info.isfile():
            if total[0] + info.size > cap:
                skipped.append(info.name)
                return None
            total[0] += info.size
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted(os.listdir(path)):
            tar.add(_path_join(path, name), arcname=name, recursive=True, filter=within_cap)
    return {"data": _b64encode(buf.getvalue()), "skipped": skipped}


def op_tar_in(req):
    import io
    import tarfile

    path = _host(req["path"])
    _makedirs(path)
    with tarfile.open(fileobj=io.BytesIO(_b64decode(req["data"])), mode="r") as tar:
        if hasattr(tarfile, "tar_filter"):
            tar.extractall(path, filter="tar")
        else:  # Python < 3.11.4 (e.g. Debian 12's 3.11.2): refuse unsafe names by hand
            for member in tar.getmembers():
                name = member.name
                if name.startswith("/") or ".." in name.split("/"):
                    raise ValueError("unsafe path in archive: %s" % name)
            tar.extractall(path)
    return {}


def _ours(me):
    """Local mode: the processes this supervisor started (its descendants and marked ones)."""
    prefix = "%d-" % me
    stats = {pid: _proc_stat(pid) for pid in _pids() if pid != me}
    stats = {pid: st for pid, st in stats.items() if st}
    ours = {pid for pid in stats if (_marker_of(pid) or "").startswith(prefix)}
    frontier = {me} | ours
    while frontier:
        children = {pid for pid, (pp, _s) in stats.items() if pp in frontier} - ours
        ours |= children
        frontier = children
    return sorted(ours)


def op_kill_all(req):
    """Kill every process in the sandbox except init (pid 1) and this supervisor, and wait
    until they have exited (:func:`_wait_exited`: on their pid file descriptors, not in
    rounds of sleeps). ``rounds``: how many times it killed (1 unless something escaped a
    round: a process forked between the listing and the kill, ``--local`` only).

    Inside a PID namespace that is everyone else; with ``--local`` only what we started."""
    me = os.getpid()
    killed = set()
    rounds = 0
    end = time.monotonic() + KILL_WAIT_S
    for round_no in range(80):
        if round_no and time.monotonic() > end:
            break
        if _local[0]:
            others = _ours(me)
        else:
            others = [pid for pid in _pids() if pid not in (1, me) and _proc_stat(pid)]
        if not others:
            break
        rounds += 1
        fds = _pidfds(others)
        if not _local[0]:
            try:
                os.kill(-1, SIGKILL)  # in the PID namespace: everyone but us and init
            except OSError:
                pass
        for pid in others:
            try:
                os.kill(pid, SIGKILL)
            except OSError:
                pass
        killed.update(others)
        _wait_exited(fds, round_no, end)
    with _procs_lock:
        for p, _ in _procs.values():
            p.wait(1)
    return {"killed": len(killed), "rounds": rounds}


class _Selector:
    """The part of ``selectors`` the relay uses, on ``select.poll`` (``selectors`` imports
    collections and math, ``socket`` enum: most of a supervisor's start again). Objects with a
    ``fileno()`` (or descriptors) are registered for READ and/or WRITE with a datum;
    :meth:`select` waits and returns (datum, READ|WRITE) pairs as ``selectors`` does (a hang-up
    or an error counts as both, masked by what was asked)."""

    READ, WRITE = 1, 2

    def __init__(self):
        self._poll = select.poll()
        self._keys = {}  # descriptor -> (events, datum)

    @staticmethod
    def _fd(obj):
        return obj if isinstance(obj, int) else obj.fileno()

    @staticmethod
    def _mask(events):
        return (select.POLLIN if events & 1 else 0) | (select.POLLOUT if events & 2 else 0)

    def register(self, obj, events, data):
        fd = self._fd(obj)
        self._poll.register(fd, self._mask(events))
        self._keys[fd] = (events, data)

    def modify(self, obj, events, data):
        fd = self._fd(obj)
        self._poll.modify(fd, self._mask(events))
        self._keys[fd] = (events, data)

    def unregister(self, obj):
        fd = self._fd(obj)
        self._poll.unregister(fd)
        del self._keys[fd]

    def events(self, obj):
        """What ``obj`` is registered for, None when it is not."""
        key = self._keys.get(self._fd(obj))
        return None if key is None else key[0]

    def select(self):
        ready = []
        for fd, ev in self._poll.poll():
            key = self._keys.get(fd)
            if key is None:
                continue
            mask = (self.WRITE if ev & ~select.POLLIN else 0) | (
                self.READ if ev & ~select.POLLOUT else 0
            )
            if mask & key[0]:
                ready.append((key[1], mask & key[0]))
        return ready


class _Relay:
    """Every ``forward`` of this supervisor, served by one thread with a selector (see the
    module docs). Changes come from request threads through :meth:`call`, which runs a
    function in the relay's thread and waits for it."""

    CHUNK = 65536

    def __init__(self):
        import _socket  # C: socket's module imports enum (a supervisor's start, twice over)

        self.socket = _socket
        self.sel = _Selector()
        self.READ, self.WRITE = _Selector.READ, _Selector.WRITE
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        self.sel.register(self.wake_r, self.READ, None)
        self.todo = deque()
        self.listeners = {}  # port -> (listening socket, unix path, max connections, pairs)
        self.ends = {}  # connected socket -> _End
        _start_thread(self._run)

    def call(self, fn, *args):
        """Run ``fn(*args)`` in the relay's thread; returns its result (or raises its error)."""
        done = _Event()
        box = []

        def job():
            try:
                box.append((True, fn(*args)))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                box.append((False, exc))
            done.set()

        self.todo.append(job)
        os.write(self.wake_w, b"x")
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def _run(self):
        while True:
            for data, mask in self.sel.select():
                try:
                    self._event(data, mask)
                except Exception:  # noqa: BLE001 - one connection's failure ends only it
                    if isinstance(data, _End):
                        self._close_pair(data)

    def _event(self, data, mask):
        if data is None:  # woken for jobs
            try:
                os.read(self.wake_r, 4096)
            except BlockingIOError:
                pass
            while self.todo:
                self.todo.popleft()()
        elif isinstance(data, int):  # a listener: data is its port
            self._accept(data)
        elif data.sock is not None:  # a piped connection (closed earlier in this batch: skip)
            if mask & self.READ:
                self._read(data)
            if mask & self.WRITE and data.sock is not None:
                self._write(data)

    def listen(self, port, path, max_connections):
        sock = self.socket.socket(self.socket.AF_INET, self.socket.SOCK_STREAM)
        try:
            sock.setsockopt(self.socket.SOL_SOCKET, self.socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.listeners[port] = (sock, path, max_connections, set())
        self.sel.register(sock, self.READ, port)

    def unlisten(self, port):
        entry = self.listeners.pop(port, None)
        if entry is None:
            return False
        sock, _, _, pairs = entry
        self.sel.unregister(sock)
        sock.close()
        for end in list(pairs):
            self._close_pair(end)
        return True

    def _accept(self, port):
        sock, path, cap, pairs = self.listeners[port]
        while True:
            try:
                fd, _ = sock._accept()
                client = self.socket.socket(sock.family, sock.type, 0, fd)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors: the next event tries again
                return
            if len(pairs) >= cap:
                client.close()
                continue
            upstream = self.socket.socket(self.socket.AF_UNIX, self.socket.SOCK_STREAM)
            try:
                upstream.setblocking(False)
                upstream.connect(path)
            except OSError as exc:
                upstream.close()
                body = ("clawrig forwarder: %s is not reachable (%s)\n" % (path, exc)).encode()
                head = (
                    "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
                    "Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
                )
                try:  # a few hundred bytes: the socket's buffer takes them at once
                    client.setblocking(False)
                    client.send(head.encode() + body)
                except OSError:
                    pass
                client.close()
                continue
            client.setblocking(False)
            a, b = _End(client, pairs), _End(upstream, pairs)
            a.peer, b.peer = b, a
            pairs.add(a)
            for end in (a, b):
                self.ends[end.sock] = end
                self.sel.register(end.sock, self.READ, end)

    def _update(self, end):
        """(Re)register ``end`` for what it waits for: reading while what it read last went
        out to its peer, writing while its peer's bytes wait for it."""
        if end.sock is None:
            return
        events = 0
        if not end.eof and not end.out_for_peer:
            events |= self.READ
        if end.peer.out_for_peer:
            events |= self.WRITE
        have = self.sel.events(end.sock)
        if have is None:
            if events:
                self.sel.register(end.sock, events, end)
        elif not events:
            self.sel.unregister(end.sock)
        elif have != events:
            self.sel.modify(end.sock, events, end)

    def _read(self, end):
        try:
            data = end.sock.recv(self.CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close_pair(end)
            return
        peer = end.peer
        if not data:
            end.eof = True
        else:
            end.out_for_peer = data
            self._flush(end)
        if end.eof and not end.out_for_peer:
            self._shut(peer)
        self._update(end)
        self._update(peer)
        self._maybe_done(end)

    def _write(self, end):
        self._flush(end.peer)
        if end.peer.eof and not end.peer.out_for_peer:
            self._shut(end)
        self._update(end)
        self._update(end.peer)
        self._maybe_done(end)

    def _flush(self, src):
        """Send what ``src`` read to its peer, as much as its socket takes now."""
        dest = src.peer
        if dest.sock is None:
            src.out_for_peer = b""
            return
        try:
            sent = dest.sock.send(src.out_for_peer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close_pair(src)
            return
        src.out_for_peer = src.out_for_peer[sent:]

    def _shut(self, end):
        if end.sock is not None and not end.shut:
            end.shut = True
            try:
                end.sock.shutdown(self.socket.SHUT_WR)
            except OSError:
                pass

    def _maybe_done(self, end):
        a, b = end, end.peer
        if a.sock is None or b.sock is None:
            return
        if a.eof and b.eof and not a.out_for_peer and not b.out_for_peer:
            self._close_pair(a)

    def _close_pair(self, end):
        end.pairs.discard(end)
        end.pairs.discard(end.peer)
        for e in (end, end.peer):
            if e is None or e.sock is None:
                continue
            if self.sel.events(e.sock) is not None:
                self.sel.unregister(e.sock)
            self.ends.pop(e.sock, None)
            e.sock.close()
            e.sock = None


class _End:
    """One side of a piped connection: its socket, what it read that still waits to go to
    its peer, whether it sent EOF, whether we shut its writing side."""

    __slots__ = ("sock", "peer", "out_for_peer", "eof", "shut", "pairs")

    def __init__(self, sock, pairs):
        self.sock = sock
        self.peer = None
        self.out_for_peer = b""
        self.eof = False
        self.shut = False
        self.pairs = pairs


_relay = []  # type: list
_relay_lock = _thread.allocate_lock()


def _the_relay():
    with _relay_lock:
        if not _relay:
            _relay.append(_Relay())
        return _relay[0]


def op_forward(req):
    """Listen on 127.0.0.1:``port`` and pipe each connection to the unix socket ``socket``
    (at most ``max_connections`` at once); listening when this returns."""
    relay = _the_relay()
    path = _host(req["socket"])
    relay.call(relay.listen, int(req["port"]), path, int(req.get("max_connections") or 64))
    return {"port": int(req["port"])}


def op_unforward(req):
    """Stop the forward on ``port``: its listener and its connections closed."""
    if not _relay:
        return {"closed": False}
    relay = _relay[0]
    return {"closed": relay.call(relay.unlisten, int(req["port"]))}


def op_adopt(req):
    """A pooled sandbox taken by a trial: its environment replaces the pooled defaults and
    the supervisor enters the workspace mounted meanwhile (its old cwd is the empty slot)."""
    global _base_env
    _base_env = {str(k): str(v) for k, v in (req.get("env") or {}).items()}
    _base_env.pop("CLAWRIG_LOG_DIR", None)
    if req.get("cwd"):
        os.chdir(_host(req["cwd"]))
    return {}


def op_shutdown(req):
    op_kill_all(req) if req.get("kill") else None
    _send({"id": req["id"], "ok": True})
    os._exit(0)


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


_ARG_OPS = ("exec", "spawn", "read_file", "write_file", "list", "tar_out", "tar_in", "write")


def _serve(req):
    try:
        fn = OPS[req.get("op")]
    except KeyError:
        _send(
            {
                "id": req.get("id"),
                "ok": False,
                "error": {"type": "ValueError", "message": "unknown op %r" % req.get("op")},
            }
        )
        return
    try:
        result = fn(req)
        result["id"] = req["id"]
        result["ok"] = True
        _send(result)
    except Exception as exc:  # every failure goes back to the client, typed
        if isinstance(exc, (ValueError, TypeError)) and req.get("op") in _ARG_OPS:
            # bad arguments from the model (a NUL byte in a path or command ...): an OS-level
            # "invalid argument" for this call, not a failure of the sandbox
            exc = OSError(errno.EINVAL, "invalid argument: %s" % exc)
        err = {"type": type(exc).__name__, "message": str(exc)}
        if isinstance(exc, OSError) and exc.errno is not None:
            err["errno"] = exc.errno
            err["message"] = exc.strerror or str(exc)
            if exc.filename is not None:
                err["filename"] = str(exc.filename)
        _send({"id": req.get("id"), "ok": False, "error": err})


def _prctl(option, arg):
    """prctl(2) through ctypes' C module alone (``ctypes`` itself imports struct and more: a
    fifth of a supervisor's start); what ``ctypes.CDLL(None, use_errno=True).prctl`` does.
    Raises OSError (errno kept), ImportError or AttributeError (no such C module here)."""
    import _ctypes

    class Int(_ctypes._SimpleCData):  # ctypes.c_int
        _type_ = "i"

    class Function(_ctypes.CFuncPtr):  # a C function of the process, int result, errno kept
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = Int

    class Program:  # dlopen(NULL): the process's own symbols, libc's among them
        _handle = _ctypes.dlopen(None, 0)

    if Function(("prctl", Program()))(option, arg, 0, 0, 0) != 0:
        raise OSError(_ctypes.get_errno(), "prctl(%d) failed" % option)


_protected = [False]
"""True once this process is non-dumpable (:func:`_protect_self`); a forked Python child says so
to its script as ``sys.clawrig_not_dumpable`` (the grader's runner then skips its own prctl)."""


def _protect_self():
    """Make this process non-dumpable: the agent's commands run as the same uid without
    capabilities, so they can then neither ptrace it nor open /proc/<pid>/fd or /mem (its
    pipes to the harness). Its children get the default back on exec (a fork keeps it)."""
    PR_SET_DUMPABLE = 4
    try:
        try:
            _prctl(PR_SET_DUMPABLE, 0)
        except (ImportError, AttributeError, TypeError):  # pragma: no cover - another Python
            import ctypes

            if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed") from None
        _protected[0] = True
    except (OSError, AttributeError) as exc:  # pragma: no cover - reported to the harness
        sys.stderr.write("supervisor: cannot protect itself: %s\n" % exc)


def _close_on_exec():
    """Mark every descriptor this process inherited beyond stdio close-on-exec: commands start
    with their own 0, 1 and 2 only (what a launcher left open must not reach them)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # pragma: no cover - no /proc
        return
    for fd in fds:
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass


_start_tz = [None]
"""TZ as this process's C library took it (:func:`main`); a forked Python whose command's
differs reads its own (``time.tzset``)."""


def main(argv):
    global _base_env
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--root-map" and args:
            src, _, dst = args.pop(0).partition("=")
            _root_map.append((src, dst))
        elif a == "--local":
            _local[0] = True
        elif a == "--proto-socket" and args:
            # the harness's socket (Docker: not the container's stdio, which pid 1 holds)
            import _socket

            conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            conn.connect(args.pop(0))
            os.dup2(conn.fileno(), 0)
            os.dup2(conn.fileno(), 1)
            conn.close()
        elif a == "--proto-fds" and args:
            # the harness's pipes, passed beside stdio (not held by bwrap's init): they become
            # this process's stdin and stdout; stdio it had (/dev/null) is replaced
            fd_in, fd_out = (int(x) for x in args.pop(0).split(","))
            os.dup2(fd_in, 0)
            os.dup2(fd_out, 1)
            os.close(fd_in)
            os.close(fd_out)
    _root_map.sort(key=lambda x: -len(x[0]))
    _close_on_exec()
    if not _local[0]:
        _protect_self()
    _base_env = {k: v for k, v in _environ().items() if k != "CLAWRIG_LOG_DIR"}
    _start_tz[0] = _base_env.get("TZ")
    # SIGPIPE stays ignored (Python's default): writing to a background process that has exited
    # must be an error for that call, not the end of the supervisor.
    _send({"id": 0, "ok": True, "ready": True, "pid": os.getpid()})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = _loads(line)
        except ValueError:
            continue
        if req.get("op") in ("ping", "poll", "log", "cancel"):
            _serve(req)  # cheap ops inline: no thread start cost
        else:
            try:
                _start_thread(_serve, req)
            except OSError as exc:
                err = {"type": "BlockingIOError", "errno": exc.errno, "message": exc.strerror}
                _send({"id": req.get("id"), "ok": False, "error": err})
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
