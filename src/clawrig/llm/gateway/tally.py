"""The USD a job spent upstream, shared by its harness processes (``--workers``).

A file of 8 bytes: one IEEE 754 double (native byte order), mapped into every process that
counts. :meth:`SpendTally.add` adds under an exclusive ``flock`` on the file, so concurrent
adds from several processes are never lost; :meth:`SpendTally.total` reads it without one (an
aligned 8-byte read is not torn on the machines this runs on).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
from pathlib import Path

_DOUBLE = struct.Struct("d")


class SpendTally:
    """USD spent, in the file ``path`` (created as 0.0 when missing or empty). Raises
    OSError when the file cannot be opened or mapped."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_size < _DOUBLE.size:
                os.ftruncate(fd, _DOUBLE.size)  # zero bytes: 0.0
            fcntl.flock(fd, fcntl.LOCK_UN)
            self._map = mmap.mmap(fd, _DOUBLE.size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def add(self, usd: float) -> None:
        """Add ``usd`` (USD) to the job's total."""
        if not usd:
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            _DOUBLE.pack_into(self._map, 0, _DOUBLE.unpack_from(self._map)[0] + usd)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def total(self) -> float:
        """USD spent so far by every process that shares the file."""
        value: float = _DOUBLE.unpack_from(self._map)[0]
        return value
