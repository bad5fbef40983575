"""Attack class 3 (issue 14): one trial must not take down the job. Each attack runs for real:
bwrap sandboxes, the native agent driven by a scripted model on loopback, real grading, real
file systems (a loop-mounted trial disk; a small tmpfs as a full output disk)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from integrity_helpers import (
    HONEST,
    attack_job,
    job_results,
    responder,
    tool_outputs,
    write_bench,
)

from clawrig.errors import AgentFault
from clawrig.leftovers import remove_tree, sweep_dead
from clawrig.runner import trial as trial_mod
from clawrig.runner.batch import run_job
from clawrig.runner.trial import TrialServices, _manifest, run_trial
from clawrig.sandbox import Limits, SandboxConfig, create_sandbox
from clawrig.sandbox.disk import can_make_disks
from clawrig.sandbox.userns import SANDBOX_INOTIFY_INSTANCES
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.tasks.registry import load_tasks

DEEP = (
    "python3 -c \"import os\nfor root in ('/tmp_workspace', '/tmp'):\n os.chdir(root)\n"
    " for _ in range(1500):\n  os.mkdir('d'); os.chdir('d')\nprint('deep')\""
)


@pytest.mark.sandbox
async def test_a_deep_tree_or_too_many_files_end_their_trial_not_the_job(
    scripted_server, tmp_path, monkeypatch
):
    # t1: 1,500 nested folders in the workspace and /tmp (RecursionError in the manifest and
    # in rmtree on main); t2: more files than the harness lists; t3: honest
    monkeypatch.setattr(trial_mod, "MANIFEST_MAX_ENTRIES", 2000)
    many = "mkdir -p /tmp_workspace/m && cd /tmp_workspace/m && seq 3000 | xargs touch"
    tasks_dir = write_bench(tmp_path / "bench", 3)
    srv = scripted_server(responder=responder({1: [DEEP, HONEST], 2: [many, HONEST]}))
    job = attack_job(tmp_path / "bench", tmp_path / "out")
    summary = await run_job(job, load_tasks(tasks_dir), TrialServices(model=srv.chat_model()))
    got = job_results(tmp_path / "out")
    assert sorted(got) == ["t1", "t2", "t3"] and len(summary["tasks"]) == 3
    assert (
        got["t1"]["error"]["kind"] == "agent"
        and "128 folders deep" in got["t1"]["error"]["message"]
    )
    assert got["t1"]["score"]["score"] == 0.0
    assert "deep" in tool_outputs(Path(got["t1"]["folder"]))[0]
    assert got["t2"]["error"]["kind"] == "agent"
    assert "more than 2000 files" in got["t2"]["error"]["message"]
    assert got["t3"]["error"] is None and got["t3"]["score"]["score"] == 1.0


def test_deep_trees_left_by_a_killed_job_are_swept(tmp_path):
    # what a killed harness left: a trial folder holding a 2,000-level tree (shutil.rmtree
    # dies of RecursionError there, even with ignore_errors)
    dead = subprocess.Popen(["true"])
    dead.wait()
    folder = tmp_path / f"clawrig-trial-{dead.pid}-abc"
    folder.mkdir()
    here = os.getcwd()
    try:
        os.chdir(folder)
        for _ in range(2000):
            os.mkdir("d")
            os.chdir("d")
    finally:
        os.chdir(here)
    assert sweep_dead(tmp_path) == [folder] and not folder.exists()
    deep = tmp_path / "deep"
    deep.mkdir()
    subprocess.run(
        ["sh", "-c", "cd deep && for i in $(seq 1500); do mkdir d && cd d; done"],
        cwd=tmp_path,
        check=True,
    )
    remove_tree(deep)
    assert not deep.exists()


def test_collecting_never_reads_new_files_and_stops_at_its_deadline(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "same.txt").write_text("initial\n")
    (ws / "kept.txt").write_text("kept\n")
    before = _manifest(ws)
    assert before["kept.txt"] == "5:" + hashlib.sha256(b"kept\n").hexdigest()
    (ws / "same.txt").write_text("changed\n")  # same size: must be hashed to be seen
    with open(ws / "sparse.bin", "wb") as fh:
        fh.truncate(1000 * 1024**2)  # a 1000 MiB sparse file: new, so never read
    after = _manifest(ws, known=before)
    assert after["sparse.bin"] == f"{1000 * 1024**2}:"
    assert after["same.txt"] == "8:" + hashlib.sha256(b"changed\n").hexdigest()
    assert after["kept.txt"] == before["kept.txt"]
    with pytest.raises(AgentFault, match="deadline"):
        _manifest(ws, deadline=0.0)


@pytest.mark.sandbox
@pytest.mark.skipif(not can_make_disks(), reason="trial disks need root and mke2fs")
async def test_filling_the_disk_is_the_agents_error_and_stays_on_its_disk(
    scripted_server, tmp_path
):
    tasks = load_tasks(write_bench(tmp_path / "bench", 1))
    fill = "head -c 200M /dev/zero > /tmp_workspace/big; echo rc=$?; head -c 50M /dev/zero > /tmp/x"
    srv = scripted_server(responder=responder({1: [HONEST, fill]}))
    config = TrialConfig(agent="native", model="scripted/x", disk_mb=64)
    result, folder = await run_trial(
        tasks[0], config, tmp_path / "out", services=TrialServices(model=srv.chat_model())
    )
    outputs = tool_outputs(folder)
    assert "No space left on device" in outputs[1] and "rc=1" in outputs[1]
    assert result.error is not None and result.error.kind == "agent"
    assert "disk (64 MiB, --disk-mb) is full" in result.error.message and result.score.score == 0.0
    # result.json says how the sandbox was held: a 64 MiB disk, each limit's mechanism
    recorded = json.loads((folder / "result.json").read_text())["protections"]
    assert recorded["disk"] == f"trial disk of {64 * 1024**2} bytes"
    assert set(recorded) == {"memory", "processes", "file_size", "shm", "uid", "disk"}
    # the disk is gone with the trial: nothing of it mounted, nothing left in the temp folder
    mounts = Path("/proc/self/mountinfo").read_text()
    assert f"clawrig-trial-{os.getpid()}-" not in mounts


@pytest.mark.sandbox
async def test_a_trial_without_a_disk_says_which_flag_turned_it_off(scripted_server, tmp_path):
    tasks = load_tasks(write_bench(tmp_path / "bench", 1))
    srv = scripted_server(responder=responder({}))
    config = TrialConfig(agent="native", model="scripted/x", disk_mb=0)
    _, folder = await run_trial(
        tasks[0], config, tmp_path / "out", services=TrialServices(model=srv.chat_model())
    )
    recorded = json.loads((folder / "result.json").read_text())["protections"]
    assert recorded["disk"] == "none: no disk size set (--disk-mb 0)"


@pytest.mark.sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small output disk needs root")
async def test_a_full_output_disk_ends_that_trial_not_the_job(scripted_server, tmp_path):
    # the job's output folder is a 3 MiB tmpfs; t1's agent leaves a 4 MiB result that the
    # harness copies into its trial folder (ENOSPC), t2 is honest
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(out)], check=True)
    try:
        tasks = load_tasks(write_bench(tmp_path / "bench", 2))
        big = "mkdir -p results && head -c 4M /dev/urandom > results/r.bin"
        srv = scripted_server(responder=responder({1: [big]}))
        summary = await run_job(
            attack_job(tmp_path / "bench", out), tasks, TrialServices(model=srv.chat_model())
        )
        got = job_results(out)
        assert list(got) == ["t2"] and got["t2"]["score"]["score"] == 1.0
        assert summary["tasks"] and (out / "summary_scripted_x.json").is_file()
        assert not list(out.glob("*/.tmp-*"))  # the half-written folder is gone
    finally:
        subprocess.run(["umount", "-l", str(out)], check=False)


@pytest.mark.sandbox
async def test_dev_shm_is_bounded_and_no_tmpfs_can_be_mounted_inside(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chmod(tmp_path, 0o755)
    limits = Limits(memory_bytes=256 * 1024**2, shm_bytes=32 * 1024**2)
    sb = create_sandbox("bwrap", SandboxConfig(workspace_dir=ws, limits=limits))
    await sb.start()
    try:
        r = await sb.exec("head -c 100M /dev/zero > /dev/shm/x; echo rc=$?; du -k /dev/shm/x")
        assert "No space left on device" in r.stderr and "rc=1" in r.stdout
        assert int(r.stdout.split()[-2]) <= 32 * 1024
        r = await sb.exec("unshare -Urm sh -c 'mount -t tmpfs none /tmp && echo MOUNTED'")
        assert r.exit_code != 0 and "MOUNTED" not in r.stdout
        r = await sb.exec("echo x > /dev/planted")
        assert r.exit_code != 0 and "Read-only file system" in r.stderr
    finally:
        await sb.stop()


INOTIFY_HOG = (
    'python3 -c "import ctypes, time\nlibc = ctypes.CDLL(None)\nn = 0\n'
    "while n < 100000 and libc.inotify_init() >= 0:\n n += 1\n"
    "open('/tmp/hogged', 'w').write(str(n))\ntime.sleep(60)\" > /dev/null 2>&1 &"
    " while [ ! -s /tmp/hogged ]; do sleep 0.1; done; cat /tmp/hogged"
)


def _host_inotify_ok() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init()
    if fd >= 0:
        os.close(fd)
    return fd >= 0


@pytest.mark.sandbox
async def test_a_sandbox_cannot_take_the_hosts_inotify_instances(tmp_path):
    # a daemon opening inotify instances until refused: sandboxes started by root count
    # against root's per-user limit (128 on Debian), so one sandbox took all of them and the
    # host's root could open none (systemd, dockerd, any watcher: EMFILE)
    boxes = []
    for name in ("a", "b"):
        ws = tmp_path / name
        ws.mkdir()
        boxes.append(create_sandbox("bwrap", SandboxConfig(workspace_dir=ws)))
    os.chmod(tmp_path, 0o755)
    try:
        counts = []
        for sb in boxes:
            await sb.start()
            r = await sb.exec(INOTIFY_HOG, timeout_s=60)
            counts.append(int(r.stdout.split()[-1]))
            assert _host_inotify_ok()  # the host keeps its own share
        assert counts == [SANDBOX_INOTIFY_INSTANCES] * 2  # each sandbox its own cap
    finally:
        for sb in boxes:
            await sb.stop()


@pytest.mark.sandbox
async def test_a_hanging_warmup_meets_the_setup_deadline(scripted_server, tmp_path, monkeypatch):
    monkeypatch.setattr(trial_mod, "SETUP_S", 3.0)
    tasks_dir = write_bench(tmp_path / "bench", 2, warmup={1: "sleep 600"})
    srv = scripted_server(responder=responder({}))
    job = attack_job(tmp_path / "bench", tmp_path / "out")
    await run_job(job, load_tasks(tasks_dir), TrialServices(model=srv.chat_model()))
    got = job_results(tmp_path / "out")
    assert got["t1"]["error"]["kind"] == "setup"
    assert "deadline of 3 s" in got["t1"]["error"]["message"]  # setup or sandbox_start
    assert got["t2"]["error"] is None and got["t2"]["score"]["score"] == 1.0


def test_a_note_when_trials_at_once_could_fill_the_hosts_disk(tmp_path):
    from clawrig.runner.preflight import note_disk_space

    tasks = load_tasks(write_bench(tmp_path / "bench", 2))
    st = os.statvfs(tempfile.gettempdir())
    free_mib = st.f_bavail * st.f_frsize // 1024**2
    big = JobConfig(suite_path=tmp_path, parallel=2, trial=TrialConfig(disk_mb=free_mib // 2 + 64))
    [note] = note_disk_space(tasks, big)
    assert note.startswith("2 trial(s) at once") and " GiB free under " in note
    # two disks of half the free space plus 64 MiB each: ~128 MiB more than is free, which a
    # whole-GiB rounding showed as "16 GiB, more than the 16 GiB free"
    short = re.search(r"could write \S+ GiB, ([\d.]+) MiB more than the \S+ GiB free", note)
    assert short is not None, note
    assert 64 < float(short.group(1)) < 192  # 128 MiB, give or take what others write meanwhile
    small = big.model_copy(update={"trial": TrialConfig(disk_mb=64)})
    assert note_disk_space(tasks, small) == []


def test_a_note_when_trials_at_once_could_use_more_memory_than_the_host_has(tmp_path):
    from clawrig.runner.preflight import note_memory

    tasks = load_tasks(write_bench(tmp_path / "bench", 4))
    total_mib = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 1024**2
    over = JobConfig(
        suite_path=tmp_path, parallel=4, trial=TrialConfig(memory_mb=total_mib // 4 + 64)
    )
    [note] = note_memory(tasks, over)
    assert note.startswith(f"4 trial(s) at once with a {total_mib // 4 + 64} MiB memory limit")
    assert "--memory-mb" in note
    under = over.model_copy(update={"trial": TrialConfig(memory_mb=total_mib // 4 - 64)})
    assert note_memory(tasks, under) == []
    one = over.model_copy(update={"parallel": 1})  # one trial: its own limit is the cap
    assert note_memory(tasks, one) == []


async def test_waiting_on_the_harness_moves_the_phase_deadlines():
    # a phase deadline (0.5 s) while the trial waits 1 s for a grading slot another trial
    # holds: the wait is the harness's, so the deadline moves and the phase finishes
    import asyncio

    from clawrig.waits import WaitClock, slot

    clock, sem = WaitClock(), asyncio.Semaphore(1)
    await sem.acquire()
    asyncio.get_running_loop().call_later(1.0, sem.release)
    cm = asyncio.timeout(0.5)
    clock.track(cm)
    async with cm:
        async with slot(sem, "grading", clock):
            await asyncio.sleep(0.1)
    assert not cm.expired() and clock.paused_s >= 0.9
    assert clock.waits.grading >= 0.9


async def test_a_phase_queued_for_a_worker_thread_is_not_cut_off_by_its_deadline():
    # 500 trials on 2 cores: the end state's walk queued behind other trials' and the warm
    # pool's file work in the loop's worker threads, past the collect deadline (120 s), and the
    # trials were scored 0 as agent errors: the queueing is the harness's, so it moves the
    # deadline, and the work reads the moved deadline once it runs
    import asyncio
    import time
    from concurrent.futures import ThreadPoolExecutor

    from clawrig.waits import WaitClock, in_thread

    loop = asyncio.get_running_loop()
    workers = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(workers)
    clock = WaitClock()
    token = clock.install()
    try:
        busy = loop.run_in_executor(None, time.sleep, 1.0)  # another trial's work holds the thread
        cm = asyncio.timeout(0.4)
        clock.track(cm)
        seen: list[float] = []
        async with cm:
            await in_thread(lambda: seen.append(cm.when() - loop.time()))
        await busy
    finally:
        clock.uninstall(token)
        workers.shutdown()
    assert not cm.expired()
    assert clock.waits.thread >= 0.8 and clock.paused_s >= 0.8
    assert seen and seen[0] > 0.2  # the deadline the work read was already moved


@pytest.mark.sandbox
async def test_many_small_files_are_kept_in_the_trial_folder_up_to_a_count(
    scripted_server, tmp_path
):
    # 12,000 empty files in results/: only bytes were capped, so each became a file in
    # end_state/ and another in task_output/ (99,000 of them: two minutes, 200,000 files in
    # the job's folder for one trial); now at most END_STATE_MAX_FILES of each
    tasks = load_tasks(write_bench(tmp_path / "bench", 1))
    many = "mkdir -p results/m && cd results/m && seq 12000 | xargs touch"
    srv = scripted_server(responder=responder({1: [HONEST, many]}))
    config = TrialConfig(agent="native", model="scripted/x")
    result, folder = await run_trial(
        tasks[0], config, tmp_path / "out", services=TrialServices(model=srv.chat_model())
    )
    assert result.error is None and result.score.score == 1.0
    for copy in ("end_state", "task_output"):
        kept = [p for p in (folder / copy).rglob("*") if p.is_file()]
        assert len(kept) == 10_000, copy
        assert (folder / copy / ("results/out.txt" if copy == "end_state" else "out.txt")).is_file()
