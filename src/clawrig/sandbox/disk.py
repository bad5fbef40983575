"""A per-trial disk: a file system of fixed size that holds everything a trial's sandbox can
write on the host (the workspace, /root, /tmp, /run/clawrig, the writable system's upper
folder), so one trial filling it gets ENOSPC (or EDQUOT-like "no space") inside its sandbox
and never fills the host's disk.

Mechanism: a sparse image file (``disk.img``, host blocks used only as the sandbox writes)
formatted ext4 without a journal, with one inode per :data:`BYTES_PER_INODE` (so the number of
files and folders is bounded too), and loop-mounted ``nosuid,nodev,noatime`` at ``fs/`` beside
it. It needs root (mount) and mke2fs; without them :meth:`TrialDisk.mount` falls back to a
plain folder and :attr:`TrialDisk.enforced` is False (``Limits.max_file_bytes`` still caps each
file).

No process per disk (hundreds of trials start at once): mke2fs runs once per disk size and
process, on a scratch image whose written blocks (its data extents, found with
``SEEK_DATA``/``SEEK_HOLE``: ~190 KB for 8 GiB) are kept in memory as the size's
:class:`DiskTemplate`; each disk is a fresh sparse file with those blocks written back, attached
to a free loop device with the loop ioctls (``LOOP_CTL_GET_FREE``, then ``LOOP_CONFIGURE`` with
``LO_FLAGS_AUTOCLEAR`` so the device frees itself with its last mount; source: the kernel's
``include/uapi/linux/loop.h`` and loop(4)) and mounted with mount(2). Copies share the
file system's UUID, which ext4 does not mind (it never looks other mounts up by UUID). When an
ioctl is missing (a kernel before 5.8) the disk is made the old way (``mke2fs`` and ``mount -o
loop`` processes). Measured: ``benchmarks/sandbox.py`` (one disk made, mounted and removed)
and ``benchmarks/throughput.py`` (hundreds at once).

Removal is an unmount and an unlink: no walk over what the agent left (a 1,200-level tree or
150,000 empty files cost nothing to remove). An image whose loop device has let it go is not
unlinked but truncated to nothing and kept for the next disk (up to :data:`SPARE_IMAGES`): on
an ext4 without a journal (this project's CI machines, and the trial disks themselves) the
kernel skips every inode freed in the last ~30 s when it allocates one (``recently_deleted``
in fs/ext4/ialloc.c), so a new image file per disk made each file the harness created scan
past thousands of them (``find_inode_bit``: 13% of the harness's CPU at -p 32).
A harness killed with its disks mounted leaves them to :func:`clawrig.leftovers.sweep_dead`,
which unmounts what is mounted below a dead harness's folders.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawrig.leftovers import bulk_dir, in_scratch, mounting, remove_tree

BYTES_PER_INODE = 32 * 1024
"""ext4 bytes-per-inode ratio of a trial disk: an 8 GiB disk holds at most 262,144 files and
folders."""
IMAGE_NAME = "disk.img"
MOUNT_NAME = "fs"
MNT_DETACH = 2
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_BIND = 4096
MS_MOVE = 8192
MS_REC = 1 << 14
MS_PRIVATE = 1 << 18
MS_SHARED = 1 << 20
"""mount(2) flags (include/uapi/linux/mount.h), for :func:`mount` here and its callers."""
MKE2FS_ARGS = (
    "-q",
    "-F",
    "-t",
    "ext4",
    "-O",
    "^has_journal,^resize_inode",
    "-E",
    "lazy_itable_init=1,nodiscard",
    "-m",
    "0",
    "-i",
    str(BYTES_PER_INODE),
)
"""mke2fs's options for a trial disk (before the image's path)."""
LOOP_CTL_GET_FREE = 0x4C82
LOOP_CONFIGURE = 0x4C0A
LOOP_GET_STATUS64 = 0x4C05
LO_FLAGS_AUTOCLEAR = 4
LOOP_CONTROL = "/dev/loop-control"
LOOP_TRIES = 64
"""Free loop devices tried before giving up (another process may take the one the kernel
named first: EBUSY)."""


@functools.cache
def libc() -> Any:
    """The C library (ctypes, errno kept) for mount(2), umount2(2) and ioctl(2)."""
    return ctypes.CDLL(None, use_errno=True)


class _LoopInfo64(ctypes.Structure):
    """``struct loop_info64`` (include/uapi/linux/loop.h)."""

    _fields_ = [
        ("lo_device", ctypes.c_uint64),
        ("lo_inode", ctypes.c_uint64),
        ("lo_rdevice", ctypes.c_uint64),
        ("lo_offset", ctypes.c_uint64),
        ("lo_sizelimit", ctypes.c_uint64),
        ("lo_number", ctypes.c_uint32),
        ("lo_encrypt_type", ctypes.c_uint32),
        ("lo_encrypt_key_size", ctypes.c_uint32),
        ("lo_flags", ctypes.c_uint32),
        ("lo_file_name", ctypes.c_uint8 * 64),
        ("lo_crypt_name", ctypes.c_uint8 * 64),
        ("lo_encrypt_key", ctypes.c_uint8 * 32),
        ("lo_init", ctypes.c_uint64 * 2),
    ]


class _LoopConfig(ctypes.Structure):
    """``struct loop_config`` (include/uapi/linux/loop.h, Linux 5.8+)."""

    _fields_ = [
        ("fd", ctypes.c_uint32),
        ("block_size", ctypes.c_uint32),
        ("info", _LoopInfo64),
        ("reserved", ctypes.c_uint64 * 8),
    ]


@dataclass(frozen=True)
class DiskTemplate:
    """A formatted disk image of ``size_bytes`` as the blocks mke2fs wrote: ``extents`` are
    (offset in bytes, the bytes there); everything else of the image is zeros (a hole)."""

    size_bytes: int
    extents: tuple[tuple[int, bytes], ...]

    def write(self, image: Path, spare: bool = False) -> None:
        """Create ``image`` (it must not exist) as a sparse copy of the template; ``spare``:
        write it into ``image``, an empty file :func:`take_spare_image` gave. Raises OSError."""
        flags = os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(image, flags if spare else flags | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, self.size_bytes)
            for offset, data in self.extents:
                os.pwrite(fd, data, offset)
        finally:
            os.close(fd)


_templates: dict[int, DiskTemplate] = {}
_templates_lock = threading.Lock()


def disk_template(size_bytes: int, scratch: Path) -> DiskTemplate:
    """The size's :class:`DiskTemplate`, made on first use (one mke2fs per size and process,
    on a scratch image in the folder ``scratch``, removed at once). Raises OSError or
    subprocess.CalledProcessError (mke2fs failed)."""
    with _templates_lock:
        if (tpl := _templates.get(size_bytes)) is not None:
            return tpl
        fd, name = tempfile.mkstemp(prefix="template-", suffix=".img", dir=scratch)
        try:
            os.ftruncate(fd, size_bytes)
            _run("mke2fs", *MKE2FS_ARGS, name)
            extents = []
            offset = 0
            while offset < size_bytes:
                try:
                    start = os.lseek(fd, offset, os.SEEK_DATA)
                except OSError as exc:  # ENXIO: no data after offset
                    if exc.errno == errno.ENXIO:
                        break
                    raise
                end = os.lseek(fd, start, os.SEEK_HOLE)
                extents.append((start, os.pread(fd, end - start, start)))
                offset = end
        finally:
            os.close(fd)
            os.unlink(name)
        tpl = _templates[size_bytes] = DiskTemplate(size_bytes, tuple(extents))
        return tpl


@functools.cache
def _loop_control() -> int:
    """A descriptor of /dev/loop-control, kept for the process. Raises OSError."""
    return os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC)


def _ioctl(fd: int, request: int, arg: Any) -> int:
    """ioctl(2) through ctypes (the interpreter lock released); raises OSError."""
    ret = int(libc().ioctl(fd, ctypes.c_ulong(request), arg))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def attach_loop(image: Path) -> tuple[int, str]:
    """Attach ``image`` read-write to a free loop device that frees itself with its last user
    (``LO_FLAGS_AUTOCLEAR``); returns (an open descriptor of the device, its path). The caller
    mounts it, then closes the descriptor (closed unmounted, the device is freed at once).
    Raises OSError (ENOTTY/EINVAL: no ``LOOP_CONFIGURE`` on this kernel)."""
    backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    try:
        config = _LoopConfig(fd=backing)
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR
        for _ in range(LOOP_TRIES):
            n = _ioctl(_loop_control(), LOOP_CTL_GET_FREE, 0)
            path = f"/dev/loop{n}"
            try:
                dev = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:  # its node is being made (devtmpfs): take another
                continue
            try:
                _ioctl(dev, LOOP_CONFIGURE, ctypes.byref(config))
            except OSError as exc:
                os.close(dev)
                if exc.errno == errno.EBUSY:  # another attach took it first
                    continue
                raise
            return dev, path
        raise OSError(errno.EBUSY, f"no free loop device after {LOOP_TRIES} tries")
    finally:
        os.close(backing)


SPARE_IMAGES = 1024
"""At most this many emptied images are kept for later disks (module docs); 0 bytes each."""
_spare_images: list[Path] = []
_spare_lock = threading.Lock()


def loop_released(loop: str, image: Path) -> bool:
    """True when the loop device ``loop`` (``/dev/loopN``) no longer has ``image`` as its
    backing file (unbound, or bound to another file), so nothing writes to it through the
    device any more; False when it may (or either cannot be looked at)."""
    try:
        ino = os.stat(image, follow_symlinks=False).st_ino
        fd = os.open(loop, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        info = _LoopInfo64()
        _ioctl(fd, LOOP_GET_STATUS64, ctypes.byref(info))
    except OSError as exc:
        return exc.errno == errno.ENXIO  # no backing file at all
    finally:
        os.close(fd)
    return int(info.lo_inode) != ino


def keep_spare_image(image: Path) -> bool:
    """Empty ``image`` (its loop device let it go: :func:`loop_released`) and keep it for
    :func:`take_spare_image`; False (nothing done) when :data:`SPARE_IMAGES` are kept already
    or it cannot be emptied."""
    with _spare_lock:
        if len(_spare_images) >= SPARE_IMAGES:
            return False
    try:
        os.truncate(image, 0)  # frees what the agent wrote, as the unlink would have
    except OSError:
        return False
    with _spare_lock:
        _spare_images.append(image)
    return True


def take_spare_image() -> Path | None:
    """An empty image file :func:`keep_spare_image` kept, or None."""
    with _spare_lock:
        return _spare_images.pop() if _spare_images else None


def mount(
    source: str | None,
    target: Path,
    fstype: str | None = None,
    flags: int = 0,
    data: str | None = None,
) -> None:
    """mount(2) (no process; ``data``: the file system's options, at most a page of them).
    Raises OSError ("mount SOURCE on TARGET: why"; ESHUTDOWN once the process is ending:
    :func:`clawrig.leftovers.mounting`)."""
    args = [None if x is None else os.fsencode(x) for x in (source, str(target), fstype, data)]
    with mounting(target):
        if libc().mount(args[0], args[1], args[2], flags, args[3]) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def mount_ext4(device: str, target: Path) -> None:
    """mount(2) ``device`` (ext4) at ``target`` with ``nosuid,nodev,noatime`` and
    ``noinit_itable`` (the kernel does not zero the never-used inode tables mke2fs left
    uninitialised: a kernel thread writing 64 MiB per 8 GiB disk, for nothing; ext4 knows them
    unused from the group descriptors' checksummed counts). Raises OSError."""
    mount(device, target, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, "noinit_itable")


def mount_tmpfs(target: Path, size_bytes: int) -> None:
    """mount(2) a tmpfs at ``target``: ``size_bytes`` (rounded up to pages by the kernel), one
    inode per :data:`BYTES_PER_INODE` (as a trial disk), mode 0755, ``nosuid,nodev,noatime``.
    Source: the kernel's ``Documentation/filesystems/tmpfs.rst``. Raises OSError."""
    inodes = max(1024, size_bytes // BYTES_PER_INODE)
    flags = MS_NOSUID | MS_NODEV | MS_NOATIME
    mount("tmpfs", target, "tmpfs", flags, f"size={size_bytes},nr_inodes={inodes},mode=0755")


def umount_lazy(target: Path) -> bool:
    """Lazy umount2(2) (``MNT_DETACH``, what ``umount -l`` does, without its process); True
    when something was unmounted there. A loop device ``mount -o loop`` set up (autoclear)
    is freed by the kernel with its last mount."""
    return bool(libc().umount2(os.fsencode(target), MNT_DETACH) == 0)


def can_make_disks() -> bool:
    """True when this process may make trial disks (root, mke2fs and mount present)."""
    return (
        os.geteuid() == 0
        and shutil.which("mke2fs") is not None
        and shutil.which("mount") is not None
    )


class TrialDisk:
    """A fixed-size file system at ``<folder>/fs`` (see the module docs).

    ``size_bytes``: the disk's size (None or 0: no disk, ``path`` is a plain folder).
    ``in_memory``: a tmpfs of that size instead (:func:`mount_tmpfs`: a clean room's, whose
    pages its memory cgroup counts), no image or loop device.
    After :meth:`mount`, :attr:`path` is where the trial's files go and :attr:`enforced` says
    whether the size holds. :meth:`release` unmounts and removes it (idempotent, never raises).

    ``folder`` in the harness's tmpfs (:func:`clawrig.leftovers.scratch_dir`): the image is a
    file in :func:`clawrig.leftovers.bulk_dir`, and a plain folder (no disk, or one that could
    not be made) is a folder there bound at ``path``, so the trial's files are on the host's
    disk, never in memory.
    """

    def __init__(self, folder: Path, size_bytes: int | None, *, in_memory: bool = False) -> None:
        self.folder = Path(folder)
        self.size_bytes = size_bytes or 0
        self.in_memory = in_memory
        """A tmpfs of ``size_bytes`` (and one inode per :data:`BYTES_PER_INODE`), not an ext4
        image: its pages are charged to the memory cgroup of the process that writes them (a
        sandbox's: its ``memory_bytes`` bounds them with its processes' own memory)."""
        self.path = self.folder / MOUNT_NAME
        self.image = self.folder / IMAGE_NAME
        self.enforced = False
        self._bound: Path | None = None
        """The folder in :func:`clawrig.leftovers.bulk_dir` bound at :attr:`path` (a plain
        folder's, for a ``folder`` in the scratch tmpfs), else None."""
        self.problem = ""
        """Why the limit is not enforced (empty when it is, or when none was asked)."""
        self._loop: str | None = None
        """The loop device of a disk the loop ioctls attached and mounted (``/dev/loopN``;
        None for one ``mount -o loop`` made, whose device is not known), while the image is
        one of the bulk folder's: one :meth:`release` may keep for the next disk."""

    def mount(self) -> Path:
        """Make and mount the disk (or a plain folder when disks cannot be made); return
        :attr:`path`. Never raises for a missing capability; raises OSError when the host's
        own disk fails (no space for the folder). A mounted disk is left as it is (a pooled
        sandbox's, :mod:`clawrig.sandbox.pool`)."""
        if self.enforced or self._bound is not None:
            return self.path
        self.path.mkdir(parents=True, exist_ok=True)
        if not self.size_bytes:
            return self._plain()
        if not can_make_disks():
            self.problem = "needs root with mke2fs (the harness is not root)"
            return self._plain()
        if self.in_memory:
            try:
                mount_tmpfs(self.path, self.size_bytes)
            except OSError as exc:
                self.problem = _why(exc)
                return self._plain()
            self.enforced = True
            return self.path
        if in_scratch(self.folder):
            # a new name (the image is made with O_EXCL): the folder's own is unique in its
            # parent, and trial work folders and pool entries have different parents
            self.image = bulk_dir() / f"{self.folder.name}-{secrets.token_hex(6)}.img"
        try:
            try:
                self._attach_and_mount()
            except OSError as exc:
                if exc.errno not in (errno.ENOTTY, errno.EINVAL, errno.ENOENT, errno.ENODEV):
                    raise
                # no loop ioctls to speak of here: the processes do it
                with contextlib.suppress(OSError):
                    self.image.unlink()
                with open(self.image, "wb") as fh:
                    fh.truncate(self.size_bytes)
                _run("mke2fs", *MKE2FS_ARGS, str(self.image))
                with mounting(self.path):
                    _run(
                        "mount",
                        "-o",
                        "loop,nosuid,nodev,noatime,noinit_itable",
                        str(self.image),
                        str(self.path),
                    )
        except (OSError, subprocess.CalledProcessError) as exc:
            self.problem = _why(exc)
            with contextlib.suppress(OSError):
                self.image.unlink()
            return self._plain()
        os.chmod(self.path, 0o755)
        with contextlib.suppress(OSError):
            os.rmdir(self.path / "lost+found")
        self.enforced = True
        return self.path

    def _plain(self) -> Path:
        """:attr:`path` as a plain folder: for a ``folder`` in the scratch tmpfs, a folder in
        :func:`clawrig.leftovers.bulk_dir` bound there (the trial's files on the host's disk).
        Raises OSError when the bind fails."""
        if in_scratch(self.folder):
            bound = Path(tempfile.mkdtemp(prefix=f"{self.folder.name}-", dir=bulk_dir()))
            os.chmod(bound, 0o755)
            try:
                mount(str(bound), self.path, None, MS_BIND)
            except OSError:
                remove_tree(bound)
                raise
            self._bound = bound
        return self.path

    def _attach_and_mount(self) -> None:
        """The image written from the size's template, attached to a loop device and mounted
        (module docs). Raises OSError (subprocess.CalledProcessError: mke2fs failed)."""
        template = disk_template(self.size_bytes, self.image.parent)
        spare = take_spare_image() if in_scratch(self.folder) else None
        if spare is not None:
            try:
                template.write(spare, spare=True)
                self.image = spare
            except OSError:
                with contextlib.suppress(OSError):
                    spare.unlink()
                spare = None
        if spare is None:
            template.write(self.image)
        dev, path = attach_loop(self.image)
        try:
            mount_ext4(path, self.path)
        finally:
            os.close(dev)  # mounted: the mount holds the device; else it is freed now
        if in_scratch(self.folder):  # (its image is in the bulk folder)
            self._loop = path

    def usage(self) -> tuple[int, int]:
        """(bytes used, inodes used) on the disk (both 0 when it is a plain folder)."""
        if not self.enforced:
            return 0, 0
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree

    def release(self) -> None:
        """Unmount (lazily: a process still holding a file cannot keep it) and remove the
        image and folder. Idempotent; never raises."""
        if self.enforced or self._bound is not None:
            umount_lazy(self.path)
            self.enforced = False
        if os.path.ismount(self.path):  # the unmount failed: never walk into a live disk
            return
        loop, self._loop = self._loop, None
        if loop and loop_released(loop, self.image) and keep_spare_image(self.image):
            # another disk may take it now: this one's later releases must not touch it
            self.image = self.folder / IMAGE_NAME
        else:
            with contextlib.suppress(OSError):
                self.image.unlink()
        if self._bound is not None:
            remove_tree(self._bound)
            self._bound = None
        remove_tree(self.path)


def _run(*argv: str) -> None:
    subprocess.run(list(argv), capture_output=True, check=True, timeout=60)


def _why(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        err = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        return f"{exc.cmd[0]} failed: {err[-1] if err else exc.returncode}"
    return str(exc)
