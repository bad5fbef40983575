"""A writable system per trial: root inside installs software (pip, apt-get/dpkg) on the
environment, and every write is gone when the sandbox stops; the host and other sandboxes never
see it. The environment's own /root entries show in the home. bwrap: a kernel overlay over the
``base`` environment; Docker: the container's layer."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

import pytest

from clawrig.errors import SandboxError
from clawrig.sandbox import Bind, SandboxConfig, create_sandbox
from clawrig.testing.packages import make_deb, make_wheel

pytestmark = pytest.mark.sandbox


@pytest.fixture(params=["bwrap", "docker"])
def system(request: pytest.FixtureRequest, base_rootfs: Path) -> dict[str, object]:
    """SandboxConfig fields of a writable system on the base environment, per backend."""
    if request.param == "bwrap":
        if shutil.which("bwrap") is None:
            pytest.skip("bubblewrap is not installed")
        return {"kind": "bwrap", "rootfs": base_rootfs, "writable_root": True}
    return {"kind": "docker", "image": request.getfixturevalue("docker_image")}


async def _start(tmp_path: Path, system: dict[str, object], name: str):
    fields = {k: v for k, v in system.items() if k != "kind"}
    ws = tmp_path / name
    ws.mkdir()
    sb = create_sandbox(str(system["kind"]), SandboxConfig(workspace_dir=ws, **fields))
    await sb.start()
    return sb, ws


async def test_root_installs_with_pip_and_dpkg_and_it_is_gone_at_stop(
    tmp_path, system, base_rootfs
):
    tag = secrets.token_hex(4)
    mod, deb_name = f"clawrig_probe_{tag}", f"clawrig-probe-{tag}"
    a, ws_a = await _start(tmp_path, system, "a")
    b, _ = await _start(tmp_path, system, "b")
    try:
        make_wheel(ws_a, mod, mod, f"value-{tag}")
        make_deb(ws_a, deb_name, f"deb-{tag}")
        r = await a.exec(
            "pip install --no-index --root-user-action=ignore"
            f" /tmp_workspace/{mod}-1.0-py3-none-any.whl"
            f" && apt-get install -y /tmp_workspace/{deb_name}_1.0_all.deb"
            " && echo system-write > /usr/local/bin/clawrig-mark && id -u",
            merge_stderr=True,
            timeout_s=120,
        )
        assert r.exit_code == 0, r.stdout
        assert r.stdout.strip().endswith("0")  # root inside
        r = await a.exec(
            f"python3 -c 'import {mod}; print({mod}.VALUE)'; cat /usr/share/{deb_name}/hello.txt;"
            f" dpkg -s {deb_name} | grep Status"
        )
        assert r.stdout.split("\n")[:3] == [
            f"value-{tag}",
            f"deb-{tag}",
            "Status: install ok installed",
        ]
        # another sandbox on the same environment, running at the same time, sees none of it
        r = await b.exec(
            f"python3 -c 'import {mod}' 2>&1; ls /usr/share/{deb_name} /usr/local/bin/clawrig-mark"
        )
        assert "ModuleNotFoundError" in r.stdout and r.exit_code != 0
        # the environment's own /root entries are in the home, beside the harness's folders,
        # as in an image (upstream's /root/miniconda3); a write there is the sandbox's alone
        profile = (base_rootfs / "root" / ".profile").read_text()
        r = await a.exec("cat /root/.profile; echo mine >> /root/.profile; ls /root/skills")
        assert r.exit_code == 0 and r.stdout == profile, r.stdout
        r = await b.exec("cat /root/.profile")
        assert r.stdout == profile
    finally:
        await a.stop()
        await b.stop()
    assert (base_rootfs / "root" / ".profile").read_text() == profile
    # nothing reached the host or the environment's cached files
    assert not Path(f"/usr/share/{deb_name}").exists()
    assert not Path("/usr/local/bin/clawrig-mark").exists()
    if system["kind"] == "bwrap":
        rootfs = Path(system["rootfs"])  # type: ignore[arg-type]
        assert not (rootfs / "usr" / "share" / deb_name).exists()
        assert not list(rootfs.glob(f"usr/lib/python3*/*-packages/{mod}"))
        assert not list(rootfs.glob(f"usr/local/lib/python3*/*-packages/{mod}"))
    # a new sandbox starts from the clean environment again
    c, _ = await _start(tmp_path, system, "c")
    try:
        r = await c.exec(f"python3 -c 'import {mod}' 2>&1; ls /usr/share/{deb_name}")
        assert "ModuleNotFoundError" in r.stdout and r.exit_code != 0
    finally:
        await c.stop()


async def test_writable_bwrap_system_gives_no_capabilities_and_no_remount(tmp_path, base_rootfs):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    sb, _ = await _start(
        tmp_path, {"kind": "bwrap", "rootfs": base_rootfs, "writable_root": True}, "w"
    )
    try:
        caps = await sb.exec("grep CapEff /proc/self/status")
        assert caps.stdout.split()[-1] == "0000000000000000"
        r = await sb.exec(
            "mount -t tmpfs none /usr 2>&1 || echo refused; mount -o remount,suid /usr"
        )
        assert "refused" in r.stdout and r.exit_code != 0
        # a setuid file made inside is written to the trial's upper folder, under a 0700 parent
        await sb.exec(
            "cp /bin/true /usr/local/bin/suid-probe && chmod u+s /usr/local/bin/suid-probe"
        )
        ovl = sb.overlay  # type: ignore[attr-defined]
        assert (ovl.upper / "usr/local/bin/suid-probe").exists()
        assert (ovl.base.stat().st_mode & 0o777) == 0o700
    finally:
        await sb.stop()
    assert not ovl.upper.exists()  # dropped with the sandbox


async def test_overlay_needs_root_says_so(tmp_path, base_rootfs):
    from clawrig.sandbox.bwrap import BwrapSandbox

    ws = tmp_path / "ws"
    sb = BwrapSandbox(SandboxConfig(workspace_dir=ws, rootfs=base_rootfs, writable_root=True))
    sb.force_uid_drop = True  # as without cgroups: the sandbox's root is an unprivileged uid
    with pytest.raises(SandboxError, match="needs the harness to run as root"):
        await sb.start()


def _mounts(mountinfo: str) -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, per-mount options) of each line of a mountinfo text
    (proc(5): the fields before " - ", then type and source)."""
    out = []
    for line in mountinfo.splitlines():
        fields = line.split()
        sep = fields.index("-")
        out.append((fields[4], fields[sep + 1], set(fields[5].split(","))))
    return out


async def test_an_environments_root_is_one_overlay_mount_and_bwrap_writes_nothing_into_it(
    tmp_path, base_rootfs
):
    """The root is the overlay bound once at / (bwrap reads the mount table after each bind:
    one bind per top-level folder and per /root entry made 14 overlay mounts), and every mount
    point bwrap needs is in the skeleton layer, so the trial's upper folder starts empty, but
    for a point behind a link (/bin -> usr/bin), which bwrap makes as before: the skeleton
    does not hide the link."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    assert (base_rootfs / "bin").is_symlink()
    ro_dir, rw_file = tmp_path / "ro", tmp_path / "file.txt"
    ro_dir.mkdir()
    (ro_dir / "inside.txt").write_text("bound\n")
    rw_file.write_text("file bind\n")
    binds = [
        Bind(source=ro_dir, dest="/opt/clawrig-probe-ro", read_only=True),
        Bind(source=rw_file, dest="/srv/deep/probe.txt", read_only=False),
        Bind(source=ro_dir, dest="/bin/clawrig-probe", read_only=True),
    ]
    ws = tmp_path / "ws"
    ws.mkdir()
    cfg = SandboxConfig(workspace_dir=ws, rootfs=base_rootfs, writable_root=True, binds=binds)
    sb = create_sandbox("bwrap", cfg)
    await sb.start()
    try:
        upper = sb.overlay.upper  # type: ignore[attr-defined]
        made = sorted(str(p.relative_to(upper)) for p in upper.rglob("*"))
        assert made == ["usr", "usr/bin", "usr/bin/clawrig-probe"], made
        r = await sb.exec("cat /proc/self/mountinfo")
        mounts = _mounts(r.stdout)
        overlays = [(point, opts) for point, fstype, opts in mounts if fstype == "overlay"]
        assert [point for point, _ in overlays] == ["/"], overlays
        assert {"rw", "nosuid", "nodev"} <= overlays[0][1]
        r = await sb.exec(
            "stat -c %a /root; ls -d /root/.openclaw/agents/main/sessions /root/skills;"
            " cat /opt/clawrig-probe-ro/inside.txt /srv/deep/probe.txt"
            " /usr/bin/clawrig-probe/inside.txt; readlink /bin; cat /etc/hosts;"
            " echo new > /srv/deep/probe.txt; touch /made-here"
        )
        assert r.exit_code == 0, r.stderr
        mode = f"{base_rootfs.joinpath('root').stat().st_mode & 0o7777:o}"
        assert r.stdout.splitlines() == [
            mode,  # /root as the environment has it (the skeleton's folder copies its mode)
            "/root/.openclaw/agents/main/sessions",
            "/root/skills",
            "bound",
            "file bind",
            "bound",
            "usr/bin",
            "127.0.0.1\tlocalhost sandbox",
            "::1\tlocalhost ip6-localhost",
        ]
        # a writable system keeps the environment's own users
        r = await sb.exec("cat /etc/passwd")
        assert r.stdout == (base_rootfs / "etc" / "passwd").read_text()
        assert rw_file.read_text() == "new\n" and (upper / "made-here").is_file()
    finally:
        await sb.stop()


async def test_a_read_only_environment_starts_read_only_with_the_generated_users(
    tmp_path, base_rootfs
):
    """An environment without a writable system or snapshot layers is a read-only overlay
    bound at /, with the skeleton's /etc files (it did not start: bwrap could not make /etc/hosts
    in a read-only /etc); /root is the harness's private folder, writable."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    ws = tmp_path / "ws"
    ws.mkdir()
    sb = create_sandbox("bwrap", SandboxConfig(workspace_dir=ws, rootfs=base_rootfs))
    await sb.start()
    try:
        r = await sb.exec("cat /proc/self/mountinfo")
        root = [(fstype, opts) for point, fstype, opts in _mounts(r.stdout) if point == "/"]
        assert len(root) == 1 and root[0][0] == "overlay" and "ro" in root[0][1], root
        r = await sb.exec("touch /x /usr/x 2>&1; cat /etc/passwd; touch /root/y /tmp/y && echo ok")
        assert r.stdout.count("Read-only file system") == 2, r.stdout
        assert r.stdout.endswith(
            "root:x:0:0:root:/root:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\nok\n"
        )
    finally:
        await sb.stop()
