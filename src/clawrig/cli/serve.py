"""``clawrig serve SUITE``: the rollout server for RL trainers (:mod:`clawrig.rl.server`).

Serves every task of SUITE (any path ``clawrig run`` reads) on HOST:PORT until Ctrl-C. Trial
folders go under ``--output``. ``--api-key-env VAR`` names the variable holding the default
key for the trainer's model server (a request's own ``api_key`` wins); it stays in this
process's gateway and never enters a sandbox. ``--executor ray`` runs the episodes on the nodes
of a Ray cluster (``--ray-address``, ``--slots-per-node``; docs/ray.md). Exit 2 with one line
for bad usage.
"""

from __future__ import annotations

import logging
import signal
import sys
from asyncio import CancelledError
from pathlib import Path
from typing import Annotated, Any

import typer

from clawrig.choices import Executor
from clawrig.cli.common import MAX_SLOTS_PER_NODE, ROOT_HELP, terminal_safe
from clawrig.errors import UserError


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        path: Annotated[Path, typer.Argument(help="Suite path (as for clawrig run).")],
        host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
        port: Annotated[
            int, typer.Option(min=0, max=65535, help="TCP port (0 = any free port).")
        ] = 8000,
        output: Annotated[
            Path, typer.Option("--output", "-o", help="Where trial folders go.")
        ] = Path("output/rl"),
        suite: Annotated[str, typer.Option(help="all, or comma-separated task ids.")] = "all",
        root: Annotated[Path | None, typer.Option(help=ROOT_HELP)] = None,
        sandbox: Annotated[str, typer.Option(help="bwrap | docker | local")] = "bwrap",
        max_concurrency: Annotated[int, typer.Option(min=1, help="Episodes running at once.")] = 8,
        max_queue: Annotated[
            int, typer.Option(min=0, help="Episodes admitted beyond those running (then 429).")
        ] = 256,
        timeout_s: Annotated[
            float, typer.Option(min=1.0, help="Longest an episode request may take, seconds.")
        ] = 3600.0,
        max_turns: Annotated[int, typer.Option(min=1, help="Default max assistant turns.")] = 100,
        api_key_env: Annotated[
            str | None,
            typer.Option(help="Variable with the default key of the trainer's model server."),
        ] = None,
        executor: Annotated[
            Executor, typer.Option(help="Where episodes run: local, or ray (docs/ray.md).")
        ] = "local",
        ray_address: Annotated[
            str | None, typer.Option(help="--executor ray: the cluster (HOST:PORT, auto).")
        ] = None,
        slots_per_node: Annotated[
            int | None,
            typer.Option(
                min=1, max=MAX_SLOTS_PER_NODE, help="--executor ray: episodes at once per node."
            ),
        ] = None,
    ) -> None:
        """Serve episodes over HTTP for RL trainers (the rollout server).

        POST /v1/episodes, POST /v1/groups, GET /v1/tasks, GET /health."""
        import os

        from clawrig.sandbox.kinds import check_sandbox_kind

        check_sandbox_kind(sandbox)
        if not path.exists():
            raise UserError(f"PATH: no such file or folder: {path}")
        key = None
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise UserError(f"--api-key-env: {api_key_env} is not set")
            from clawrig.tasks.safety import unsendable_in_header

            if bad := unsendable_in_header(key):  # refused as a request's api_key is
                raise UserError(f"--api-key-env: {api_key_env} holds {bad}")
        from clawrig.cli.common import terminate_like_ctrl_c

        # uvicorn takes SIGINT and SIGTERM while it serves and raises the signal again once it
        # has stopped: SIGTERM's default then killed the process before its clean-up (a mounted
        # tmpfs left behind, helper-134); raised as a Ctrl-C is, it exits 143 cleaned up. From
        # here on: a SIGTERM while loading ended it with no line (helper-157)
        terminate_like_ctrl_c()
        # loading the server and the tasks takes seconds on a busy machine: say so at once
        say(f"clawrig serve: loading the server and the tasks of {path} ...")

        from clawrig.rl.episode import Rollouts
        from clawrig.spec.job import TrialConfig

        try:
            rollouts = Rollouts(
                output,
                trial=TrialConfig(sandbox=sandbox, max_turns=max_turns),
                max_concurrency=max_concurrency,
                executor=executor,
                ray_address=ray_address,
                slots_per_node=slots_per_node,
            )
        except UserError as exc:  # named as the options are
            raise UserError(_as_flags(str(exc))) from None
        try:
            _serve(rollouts, output, path, root, suite, host, port, max_queue, timeout_s, key)
        finally:
            rollouts.close()


def _serve(
    rollouts: Any,
    output: Path,
    path: Path,
    root: Path | None,
    suite: str,
    host: str,
    port: int,
    max_queue: int,
    timeout_s: float,
    key: str | None,
) -> None:
    """``clawrig serve`` once its :class:`clawrig.rl.episode.Rollouts` is made: the tasks
    read, the socket bound, uvicorn run until a stop (the caller closes ``rollouts``)."""
    import uvicorn

    from clawrig.rl.server import create_app
    from clawrig.runner.batch import select_tasks
    from clawrig.serving import exposure_warning, tcp_listener
    from clawrig.tasks.registry import load_tasks

    tasks = load_tasks(path, root=root, select=lambda tasks: select_tasks(tasks, suite, []))
    try:
        sock = tcp_listener(host, port)
    except OSError as exc:
        raise UserError(
            f"--host/--port: cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    app_ = create_app(
        rollouts, tasks, max_queue=max_queue, timeout_s=timeout_s, api_key=key, host=host
    )
    exposed = exposure_warning(
        host, "serve", "start episodes (spending its model budget) and read their trials"
    )
    if exposed is not None:
        say(exposed)
    bound = str(sock.getsockname()[0])  # (as bind read --host: ::0 is ::, helper-155)
    listening = (
        f"clawrig serve: listening on http://{f'[{bound}]' if ':' in bound else bound}:"
        f"{sock.getsockname()[1]} with "
        f"{len(tasks)} task(s) (trials in {output}; Ctrl-C stops)"
    )

    class Announced(uvicorn.Server):
        """Says the address once uvicorn accepts connections on it."""

        async def startup(self, sockets: list[Any] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                say(listening)

    server = Announced(
        uvicorn.Config(
            app_,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )
    )
    import tempfile

    from clawrig.leftovers import sweep_dead
    from clawrig.runner.heap import settle

    # what a server killed with kill -9 left mounted (its scratch tmpfs, trial disks) goes
    # now, not at this server's first episode (helper-134)
    sweep_dead(Path(tempfile.gettempdir()))
    try:  # (the trial folders a killed server left half-written are set aside now too)
        rollouts.start()
    except UserError as exc:
        raise UserError(_as_flags(str(exc))) from None
    if rollouts.set_aside:
        from clawrig.spec.layout import JobPaths

        say(
            f"clawrig serve: {rollouts.set_aside} trial folder(s) a killed writer left "
            f"half-written: set aside in {JobPaths(output).retried} with what they spent (or "
            "removed when they made no model call)"
        )
    settle()  # the server's and the tasks' objects live as long as the process
    # uvicorn puts the handler it found back before it raises the signal again: one
    # started with SIGINT ignored (`&` in a script) then stopped on it and exited 0
    # (helper-153); it exits 130 as `clawrig run` does
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.getLogger("uvicorn.error").addFilter(_say_stopping)
    server.run(sockets=[sock])


_CUT_SHORT = ("KeyboardInterrupt", "asyncio.exceptions.CancelledError")
"""How the last line of a traceback of a stop cut short by a second Ctrl-C begins."""


def _say_stopping(record: logging.LogRecord) -> bool:
    """A logging filter for uvicorn's log: its ERROR line on cancelling the requests still
    running when the stop's grace ran out (the documented way a stop ends them, not a fault)
    said as this command's own line instead, and its traceback of the lifespan that a second
    Ctrl-C interrupted left out (helper-156)."""
    said = str(record.msg).rstrip()
    if record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt | CancelledError):
        return False  # a second Ctrl-C cutting the stop short: exit 130, not a traceback
    if said.startswith("Traceback") and said.splitlines()[-1].startswith(_CUT_SHORT):
        return False  # (Starlette's text of the lifespan's shutdown, which uvicorn logs)
    if said.startswith("Cancel %s running task(s)"):
        count = record.args[0] if isinstance(record.args, tuple) and record.args else "the"
        say(
            f"clawrig serve: {SHUTDOWN_GRACE_S} s after the stop, {count} request(s) still ran: "
            "their episodes are stopped, not graded"
        )
        return False
    return True


SHUTDOWN_GRACE_S = 5
"""Seconds the episodes running when Ctrl-C or SIGTERM comes get to finish before they are
stopped (their sandboxes end; they write no trial folder): the server then exits. Without it
one Ctrl-C waited for them up to --timeout-s (an hour by default)."""


def say(line: str) -> None:
    """One status line on stderr, as it is (no markup, no wrapping). Written by the stream
    itself, not rich: a rich print that a SIGTERM's exception cut short keeps its line in
    the console's buffer, printed again before the next line (helper-157's loading stop)."""
    sys.stderr.write(terminal_safe(line) + "\n")
    sys.stderr.flush()


def _as_flags(message: str) -> str:
    """A :class:`~clawrig.rl.Rollouts` argument error worded with this command's options."""
    for arg, flag in (
        ("ray_address / slots_per_node", "--ray-address / --slots-per-node"),
        ("executor='ray'", "--executor ray"),
        ("ray_address", "--ray-address"),
        ("slots_per_node", "--slots-per-node"),
        ("executor", "--executor"),
        ("output", "--output"),
    ):
        if message.startswith(arg) or arg == "executor='ray'":
            message = message.replace(arg, flag, 1)
    return message
