"""``clawrig cleanup``: remove what clawrig processes that are gone left on this machine.

A harness stopped with ``kill -9`` (or a lost machine) cannot clean up after itself: its
sandbox and trial folders, the trial disks and warm-pool slots mounted below them, its tmpfs
scratch, its cgroups and its grading environments' staging folders stay until the next clawrig
process starts (each sweeps them then: :func:`clawrig.leftovers.sweep_dead`,
:func:`clawrig.sandbox.bwrap.sweep_stale_cgroups`). This command sweeps them now, as Inspect
AI's ``inspect sandbox cleanup`` does for its sandboxes. Only what is named after a process id
that no longer runs is touched (``clawrig-<kind>-<pid>-*``): the folders of a job running now
are kept.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add ``cleanup`` to the main app."""

    @app.command("cleanup")
    def cleanup() -> None:
        """Remove what killed clawrig processes left (folders, mounts, cgroups).

        After kill -9 or a lost machine: their sandbox and trial folders in the temp
        folder (and in /tmp, /var/tmp, /dev/shm when TMPDIR is too deep for their sockets),
        the trial disks and pool slots mounted below those, their cgroups and grading
        staging folders. Safe while jobs run: what a running process holds is kept. The next
        clawrig job does the same when it starts. Exit 1 when a folder could not be removed.
        """
        from clawrig.cli.common import stdout_console
        from clawrig.leftovers import (
            mount_points,
            owner_pid,
            pid_alive,
            socket_bases,
            sweep_dead,
        )
        from clawrig.sandbox.bwrap import sweep_stale_cgroups
        from clawrig.sandbox.pyenv import cache_root, sweep_stale_stages

        # the temp folder, and where sockets' folders went if it is too deep (helper-227)
        bases = socket_bases()
        before = set(mount_points())
        folders = [p for base in bases for p in sweep_dead(base)]
        unmounted = [  # (helper-228: the line said nothing of them)
            m
            for m in before - set(mount_points())
            if any(m == str(f) or m.startswith(f"{f}/") for f in folders)
        ]
        cgroups = sweep_stale_cgroups()
        stages = sweep_stale_stages(cache_root() / "stage")
        left = [  # (sweep_dead's kind: folders, not links or files, which are no harness's)
            p
            for base in bases
            for p in sorted(base.glob("clawrig-*-*-*"))
            if (pid := owner_pid(p.name)) is not None
            and not pid_alive(pid)
            and p.is_dir()
            and not p.is_symlink()
        ]
        console = stdout_console()
        pids = sorted({pid for p in folders if (pid := owner_pid(p.name)) is not None})
        if folders or cgroups or stages:
            said = f" (of process(es) {', '.join(map(str, pids))})" if pids else ""
            where = ", ".join(str(b) for b in bases if any(p.parent == b for p in folders))
            parts = []
            if folders:
                mounts = f", unmounting {len(unmounted)} mount(s) below them" if unmounted else ""
                parts.append(f"{len(folders)} folder(s) in {where}{said}{mounts}")
            if cgroups:
                parts.append(f"{cgroups} cgroup(s)")
            if stages:
                parts.append(f"{stages} grading environment staging folder(s)")
            console.print(
                f"removed {'; '.join(parts)} left by clawrig processes that are gone",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
        else:
            console.print(
                "nothing left by clawrig processes that are gone", highlight=False, markup=False
            )
        if left:  # still mounted (not root?), or not removable
            console.print(
                f"not removed: {len(left)} folder(s), e.g. {left[0]} (unmounting and removing "
                "them needs the rights the job ran with: root for its mounts)",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
            raise typer.Exit(1)
