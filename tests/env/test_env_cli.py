"""`clawrig env build|list|prune` and `run --env/--image`: real builds from the cache, real files,
one line and exit 2 for bad input."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clawrig.env.build import mmdebstrap_argv
from clawrig.env.spec import BUILDER_VERSION, load_env_spec

pytestmark = pytest.mark.sandbox

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))
REPO = Path(__file__).resolve().parents[2]


def clawrig(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CLAWRIG, *args],
        env={**os.environ, "COLUMNS": "250", **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_bad_specs_give_one_line_naming_the_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: Bad Name\ndebian: [python3]\n")
    typo = tmp_path / "typo.yaml"
    typo.write_text("name: ok\ndebain: [python3]\n")
    pkg = tmp_path / "pkg.yaml"
    pkg.write_text("name: ok\ndebian: ['python3; rm -rf /']\n")
    run = tmp_path / "run.yaml"
    run.write_text("name: ok\nrun: echo hi\n")
    cases = [
        (["env", "build", str(run)], f"{run}: field run: Input should be a valid list"),
        (["env", "build", "nosuch"], "environment nosuch: not a shipped name"),
        (["env", "build", str(bad)], f"{bad}: field name:"),
        (["env", "build", str(typo)], f"{typo}: field debain: Extra inputs"),
        (["env", "build", str(pkg)], f"{pkg}: field debian: Value error, not a package name"),
        (["run", str(REPO / "suites/demo"), "--env", "nosuch", "--agent", "nop"], "nosuch"),
        (
            ["run", str(REPO / "suites/demo"), "--image", "x:y", "--agent", "nop"],
            "--image: only the docker sandbox runs images",
        ),
    ]
    for args, needle in cases:
        r = clawrig(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert needle in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_build_under_way_elsewhere_is_waited_for_not_repeated(base_rootfs, tmp_path):
    """Three test workers ran three mmdebstraps of ``base`` at once (~55 s each on 2 cores),
    each keeping the first to finish. A process that finds the environment being built waits
    for that build (its lock) and takes its result."""
    import fcntl
    import select

    spec = load_env_spec("base")
    envs = tmp_path / "cache" / "environments"
    envs.mkdir(parents=True)
    with open(envs / f".build-{spec.rootfs_key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process's build, under way
        proc = subprocess.Popen(
            [CLAWRIG, "env", "build", "base"],
            env={**os.environ, "CLAWRIG_ENV_CACHE_DIR": str(tmp_path / "cache")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            said, deadline = "", time.monotonic() + 60
            while "waiting for it" not in said and time.monotonic() < deadline:
                if select.select([proc.stderr], [], [], 1)[0]:
                    said += proc.stderr.readline()
            assert "another process is building environment base: waiting for it" in said, said
            assert proc.poll() is None  # it waits
        except BaseException:
            os.killpg(proc.pid, 9)  # (a build of its own, mmdebstrap too: minutes)
            proc.wait()
            raise
        # that build ends: its environment is in place (here the session's own build)
        (envs / spec.rootfs_key).symlink_to(base_rootfs.parent)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = [line.strip() for line in (said + err).splitlines()]
    assert not [line for line in lines if line.startswith("building environment")], lines
    assert "mmdebstrap" not in said + err
    assert str(envs / spec.rootfs_key / "rootfs") in "".join(out.split())  # (wrapped at 80)


def test_build_of_a_cached_environment_is_immediate_and_list_shows_it(base_rootfs):
    spec = load_env_spec("base")
    r = clawrig("env", "build", "base")
    assert r.returncode == 0, r.stderr
    assert str(base_rootfs) in r.stdout and "mmdebstrap" not in r.stderr  # not rebuilt
    r = clawrig("env", "list")
    row = next(line for line in r.stdout.splitlines() if spec.key in line)
    kind, _name, size, unit = row.split()[:4]
    assert (kind, unit) == ("rootfs", "MiB"), row
    size_mib = float(size)
    du = subprocess.run(
        ["du", "-s", "--apparent-size", "--block-size=1", str(base_rootfs)],
        capture_output=True,
        text=True,
    )
    # du also counts folders and links: the regular files alone are a bit less
    assert 0.8 * int(du.stdout.split()[0]) <= size_mib * 1024**2 <= int(du.stdout.split()[0])


def test_prune_removes_superseded_builds_and_idle_snapshots(tmp_path):
    cache = tmp_path / "cache"
    envs, warm = cache / "environments", cache / "warm"
    old_env = envs / "base-000000000000"
    kept_env = envs / load_env_spec("base").key
    for d in (old_env, kept_env):
        (d / "rootfs" / "usr").mkdir(parents=True)
        (d / "rootfs" / "usr" / "f").write_bytes(b"x" * 1000)
        (d / "env.json").write_text("{}")
    old = time.time() - 30 * 86400
    os.utime(old_env / "env.json", (old, old))
    os.utime(kept_env / "env.json", (old, old))  # the current build of a shipped spec stays
    snaps = {}
    for name, env_name, age in (
        ("idle", kept_env.name, 30),
        ("fresh", kept_env.name, 0),
        ("orphan", old_env.name, 0),
    ):
        d = warm / name
        (d / "upper").mkdir(parents=True)
        (d / "warm.json").write_text(
            json.dumps({"backend": "bwrap", "environment": env_name, "lines": ["pip install x"]})
        )
        t = time.time() - age * 86400
        os.utime(d / "warm.json", (t, t))
        snaps[name] = d
    # a snapshot being made now and its lock stay; an unfinished one from long ago goes
    (warm / ".partial-now").mkdir()
    (warm / ".now.lock").write_text("")
    (warm / ".partial-old").mkdir()
    os.utime(warm / ".partial-old", (old, old))
    # --dry-run lists what would go, with sizes (the bytes written above), and removes nothing
    r = clawrig("env", "prune", "--dry-run", env={"CLAWRIG_ENV_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr
    meta = {name: len((d / "warm.json").read_bytes()) for name, d in snaps.items()}
    assert f"would remove rootfs {old_env.name} (1002 B)" in r.stdout  # 1000 + "{}"
    assert f"would remove warm idle ({meta['idle']} B)" in r.stdout
    assert f"would remove warm orphan ({meta['orphan']} B)" in r.stdout
    assert "would remove unfinished .partial-old (0 B)" in r.stdout
    total = (1002 + meta["idle"] + meta["orphan"]) / 1024  # over 1 KiB
    assert f"4 item(s) would be removed, freeing {total:.1f} KiB (--dry-run: nothing was)" in (
        r.stdout
    )
    assert old_env.exists() and all(d.exists() for d in snaps.values())
    assert (warm / ".partial-old").exists()
    r = clawrig("env", "prune", env={"CLAWRIG_ENV_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr
    assert not old_env.exists() and kept_env.exists()
    assert not snaps["idle"].exists() and not snaps["orphan"].exists()
    assert snaps["fresh"].exists()
    assert (warm / ".partial-now").exists() and (warm / ".now.lock").exists()
    assert not (warm / ".partial-old").exists()
    assert f"4 item(s) removed, {total:.1f} KiB freed\n" in r.stdout
    r = clawrig("env", "list", env={"CLAWRIG_ENV_CACHE_DIR": str(cache)})
    assert kept_env.name in r.stdout and "fresh" in r.stdout


def _cached_rootfs(cache: Path, key: str, file_bytes: int, meta: dict) -> Path:
    d = cache / "environments" / key
    (d / "rootfs" / "usr").mkdir(parents=True)
    (d / "rootfs" / "usr" / "f").write_bytes(b"x" * file_bytes)
    os.link(d / "rootfs" / "usr" / "f", d / "rootfs" / "usr" / "hard")  # counted once
    (d / "env.json").write_text(json.dumps(meta))
    return d


def _list_row(cache: Path, key: str) -> list[str]:
    r = clawrig("env", "list", env={"CLAWRIG_ENV_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr
    return next(line for line in r.stdout.splitlines() if key in line).split()


def test_env_list_reads_the_size_recorded_when_the_tree_was_made(tmp_path):
    """A built tree is never written again: its size is recorded when it is made and `env list`
    shows that number without walking its files (a 10 GiB cache took ~13 s to walk)."""
    cache = tmp_path / "cache"
    recorded = 123_456_789  # not what the 5000-byte tree below holds: the record is read
    _cached_rootfs(cache, "base-111111111111", 5000, {"seconds": 60, "size_bytes": recorded})
    assert _list_row(cache, "base-111111111111")[2:4] == [f"{recorded / 2**20:.1f}", "MiB"]


def test_env_list_measures_a_tree_without_a_record_once_and_keeps_its_last_use(tmp_path):
    """An item made before sizes were recorded is measured once (regular files, a hard link
    once) and its size recorded; its metadata's mtime, the item's last use, is kept."""
    cache = tmp_path / "cache"
    d = _cached_rootfs(cache, "base-222222222222", 3000, {"seconds": 60})
    used = time.time() - 3 * 86400
    os.utime(d / "env.json", (used, used))
    row = _list_row(cache, "base-222222222222")
    assert row[2:4] == [f"{3000 / 1024:.1f}", "KiB"]
    assert json.loads((d / "env.json").read_text()) == {"seconds": 60, "size_bytes": 3000}
    assert (d / "env.json").stat().st_mtime == pytest.approx(used, abs=1e-3)
    assert _list_row(cache, "base-222222222222") == row  # read from the record now


@pytest.mark.parametrize("sandbox", ["bwrap", "docker"])
def test_run_on_an_environment_with_each_backend(tmp_path, base_rootfs, sandbox, request):
    if sandbox == "docker":
        request.getfixturevalue("docker_image")
    out = tmp_path / "out"
    r = clawrig(
        "run", str(REPO / "suites/demo"), "--suite", "000015", "--agent", "oracle",
        "--sandbox", sandbox, "--env", "base", "--output", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    result = json.loads(next(out.rglob("result.json")).read_text())
    assert result["error"] is None and result["score"]["score"] == 1.0
    assert result["versions"]["environment"] == load_env_spec("base").key


async def test_a_specs_dockerfile_builds_on_the_imported_tree(tmp_path, docker_image):
    """A spec's Dockerfile is built FROM the imported root file system (no registry); the root
    file system itself is the cached one (a Dockerfile does not change its key)."""
    from clawrig.env.build import ensure_image, rootfs_path
    from clawrig.sandbox import SandboxConfig, create_sandbox

    base = load_env_spec("base")
    marker = f"dockerfile-{os.getpid()}-{time.time_ns()}"
    (tmp_path / "Dockerfile").write_text(
        f"ARG BASE\nFROM ${{BASE}}\nRUN echo {marker} > /etc/clawrig-marker\n"
    )
    spec_file = tmp_path / "env.yaml"
    spec_file.write_text(
        base.model_dump_json(exclude={"source", "dockerfile"}).replace(
            "}", ', "dockerfile": "Dockerfile"}'
        )
    )  # JSON is YAML
    spec = load_env_spec(spec_file)
    assert spec.rootfs_key == base.rootfs_key and spec.key != base.key
    assert rootfs_path(spec) == rootfs_path(base)
    tag = ensure_image(spec)
    try:
        assert tag == f"clawrig-env:{spec.key}"
        sb = create_sandbox("docker", SandboxConfig(workspace_dir=tmp_path / "ws", image=tag))
        await sb.start()
        try:
            r = await sb.exec("cat /etc/clawrig-marker; python3 -c 'print(6*7)'")
        finally:
            await sb.stop()
        assert r.stdout == f"{marker}\n42\n"
    finally:
        for name in (tag, f"{tag}-base"):
            subprocess.run(["docker", "rmi", "-f", name], capture_output=True)


def test_a_specs_run_commands_run_last_in_the_new_tree(tmp_path):
    """``run`` commands become the last mmdebstrap hooks, each in a chroot of the new tree
    after pip and npm, and are part of the build's key; a spec without any keeps the key it
    had before ``run`` existed (its digest leaves the empty field out)."""
    spec = tmp_path / "r.yaml"
    spec.write_text("name: r\npip: [requests]\nrun:\n  - echo 'a b' > /root/x\n")
    with_run = load_env_spec(spec)
    hooks = [a for a in mmdebstrap_argv(with_run, tmp_path / "t") if a.startswith("--customize")]
    assert "pip install" in hooks[-3] and "rm -rf" in hooks[-2]  # pip, its cache gone, run
    assert hooks[-1].startswith('--customize-hook=chroot "$1" env -i ')
    assert hooks[-1].endswith("/bin/sh -ec 'echo '\"'\"'a b'\"'\"' > /root/x'")
    spec.write_text("name: r\npip: [requests]\n")
    without = load_env_spec(spec)
    assert without.key != with_run.key
    body = without.model_dump(mode="json", exclude={"source", "dockerfile", "run"})
    body |= {"dockerfile_text": None, "builder": BUILDER_VERSION}
    assert without.digest == hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


# in a mount namespace of its own with a /dev/shm of its own (a canary file in it): whatever
# the build does, the host's /dev/shm is not the one it can reach
_STOPPED_BUILD = r"""
mount -t tmpfs tmpfs /dev/shm && echo keep > /dev/shm/canary || exit 97
CLAWRIG_ENV_CACHE_DIR="$CACHE" "$CLAWRIG" env build base > "$CACHE/out" 2> "$CACHE/err" & P=$!
for i in $(seq 1200); do
  grep -q "$CACHE/.*/rootfs/dev/shm" /proc/mounts && break; sleep 0.1
done
sleep 1
kill -TERM $P; wait $P; echo "rc=$?"
echo "mounts=$(grep -c "$CACHE" /proc/mounts)"
echo "canary=$(cat /dev/shm/canary)"
echo "partial=$(ls -A "$CACHE/environments" | grep -c partial)"
"""


def test_a_build_stopped_by_sigterm_unmounts_and_deletes_nothing_of_the_hosts(tmp_path):
    """helper-161 (high): SIGTERM to `clawrig env build` while mmdebstrap had the host's
    /proc, /sys, /dev/pts and /dev/shm bound into the new tree closed mmdebstrap's output
    (it died of SIGPIPE, its mounts left), and the clean-up's rmtree of the unfinished tree
    went through the bind: every file of the host's /dev/shm was deleted. Now the build step
    gets SIGTERM and time to unmount, what is still mounted is detached, and no removal
    crosses a mount."""
    cache = tmp_path / "cache"
    cache.mkdir()
    env = dict(os.environ, CACHE=str(cache), CLAWRIG=CLAWRIG)
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", _STOPPED_BUILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = dict(line.split("=", 1) for line in r.stdout.split())
    err = (cache / "err").read_text()[-2000:]
    assert said == {"rc": "143", "mounts": "0", "canary": "keep", "partial": "0"}, (said, err)
    assert err.rstrip().endswith("clawrig: interrupted (SIGTERM)"), err
