"""Egress policies: which hosts a sandbox may reach through the harness's egress proxy.

``--network`` (the agent) and ``--setup-network`` (skills and warmup) take one of:

- ``none``: nothing outside the sandbox (the agent's default);
- ``registries``: the package registries pip, npm and apt are configured to use on this machine
  (:func:`registry_hosts`; the setup default, so warmups can ``pip install`` as upstream's do);
- ``allow:<hosts>``: a comma-separated list of ``host``, ``host:port`` or ``*.domain`` entries;
- ``open``: any host.

A policy decides per (host, port); the proxy (:mod:`clawrig.egress.proxy`) enforces it and logs
every connection. Hosts are compared lower-case, without a trailing dot.
"""

from __future__ import annotations

import configparser
import ipaddress
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from clawrig.errors import UserError

PolicyMode = Literal["none", "registries", "allow", "open"]

DEFAULT_PIP_HOSTS = ("pypi.org", "files.pythonhosted.org")
DEFAULT_NPM_HOSTS = ("registry.npmjs.org",)
DEFAULT_APT_HOSTS = ("deb.debian.org", "security.debian.org")
PIP_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
NPM_ENV = ("npm_config_registry", "NPM_CONFIG_REGISTRY")


def ip_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address ``host`` spells, or None for a name: an IPv6 literal (brackets and a
    zone allowed) or any IPv4 form the C library's ``inet_aton`` takes, which is what a
    connection to that host reaches (``127.1``, ``2130706433``, ``0x7f000001`` and
    ``017700000001`` are all 127.0.0.1; helper-142 reached the host's loopback that way)."""
    text = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except (OSError, UnicodeError):
        return None


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries, or None: IPv4-mapped (``::ffff:a.b.c.d``),
    IPv4-translated (``::ffff:0:a.b.c.d``, RFC 2765), NAT64's well-known prefix
    (``64:ff9b::/96``, RFC 6052), 6to4 and Teredo (the client's). A stack or gateway may
    deliver such an address to that IPv4 address."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if int(ip) >> 32 in (0xFFFF0000, 0x64FF9B << 64):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


LOCAL_IPV6_NETWORKS = (
    ipaddress.IPv6Network("fec0::/10"),  # site-local (RFC 3879 deprecated it, not the routes)
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # local-use IPv4/IPv6 translation (RFC 8215)
)
"""IPv6 networks of a site's own that Python 3.11's ``ipaddress`` calls global."""


def held_here(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True when this machine holds ``ip`` on an interface of its own (a connection to it
    reaches this machine's services, those listening on every address too). Asked of the
    kernel's routing: the source it picks for a UDP socket connected to ``ip`` (which sends
    nothing) is ``ip`` itself only for a local route. False when no route leads there."""
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((str(ip), 9))
            source = str(probe.getsockname()[0]).split("%", 1)[0]
    except OSError:
        return False
    return ipaddress.ip_address(source) == ip


def is_public_address(address: str) -> bool:
    """True for a globally routable IP address (not loopback, private, link-local, ...) that
    this machine does not hold itself (:func:`held_here`: a host with its public address on
    an interface reached its own services through it, helper-154), an IPv6 address carrying
    an IPv4 address (:func:`embedded_ipv4`) only when that one is too; False for anything
    else: a name, and ``::/96`` (IPv4-compatible, deprecated by RFC 4291 section 2.5.5.1,
    which Python's ``ipaddress`` calls global, as it does :data:`LOCAL_IPV6_NETWORKS`), a
    multicast address."""
    ip = ip_of(address)
    if ip is None or ip.is_multicast:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and (
        int(ip) >> 32 == 0 or any(ip in net for net in LOCAL_IPV6_NETWORKS)
    ):
        return False
    inner = embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    if not ip.is_global or (inner is not None and not inner.is_global):
        return False
    return not held_here(ip) and (inner is None or not held_here(inner))


def _norm(host: str) -> str:
    return host.strip().lower().rstrip(".").strip("[]")


@dataclass(frozen=True)
class HostRule:
    """One allow-list entry: ``host`` (``*.domain`` matches every sub-domain) and an optional
    port (None: any port)."""

    host: str
    port: int | None = None

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    @classmethod
    def parse(cls, text: str) -> HostRule:
        """``host``, ``host:port``, ``[v6]:port`` or ``*.domain``. Raises ValueError."""
        text = text.strip()
        if "://" in text:
            parts = urlsplit(text)
            if not parts.hostname:
                raise ValueError(f"no host in {text!r}")
            return cls(_norm(parts.hostname), parts.port)
        host, port = text, None
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            port = int(rest[1:]) if rest.startswith(":") else None
        elif text.count(":") == 1:
            host, _, p = text.partition(":")
            port = int(p)
        host = _norm(host)
        if not host or any(c.isspace() or c in "/@" for c in host):
            raise ValueError(f"not a host name: {text!r}")
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"port out of range in {text!r}")
        return cls(host, port)

    def __str__(self) -> str:
        return self.host if self.port is None else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class NetworkPolicy:
    """A parsed egress policy (see the module docs). ``rules`` hold the allowed hosts for
    ``registries`` and ``allow``."""

    mode: PolicyMode = "none"
    rules: tuple[HostRule, ...] = field(default_factory=tuple)

    @classmethod
    def parse(cls, text: str, *, option: str = "--network") -> NetworkPolicy:
        """Parse ``none | registries | allow:<hosts> | open``.

        Raises UserError naming ``option`` for anything else (an empty host list, a bad host or
        port)."""
        text = (text or "").strip()
        if text in ("none", "open"):
            return cls(text)  # type: ignore[arg-type]
        if text == "registries":
            return cls("registries", tuple(HostRule.parse(h) for h in registry_hosts()))
        if text.startswith("allow:"):
            entries = [e for e in text[len("allow:") :].split(",") if e.strip()]
            if not entries:
                raise UserError(f"{option}: allow: needs at least one host (allow:host,host:port)")
            try:
                return cls("allow", tuple(HostRule.parse(e) for e in entries))
            except ValueError as exc:
                raise UserError(f"{option}: {exc}") from None
        raise UserError(f"{option}: expected none, registries, allow:<hosts> or open, got {text!r}")

    def allows(self, host: str, port: int) -> bool:
        """True when this policy lets a connection to ``host:port`` through."""
        if self.mode == "open":
            return True
        host = _norm(host)
        return any(rule.matches(host, port) for rule in self.rules)

    def __str__(self) -> str:
        if self.mode == "allow":
            return "allow:" + ",".join(map(str, self.rules))
        return self.mode


def _urls_hosts(value: str) -> list[str]:
    hosts = []
    for url in value.split():
        parts = urlsplit(url)
        if parts.scheme in ("http", "https") and parts.hostname:
            hosts.append(f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname)
    return hosts


def pip_config_files() -> list[Path]:
    """pip's configuration files, in pip's order (global, user, ``PIP_CONFIG_FILE``)."""
    home = Path.home()
    files = [Path("/etc/xdg/pip/pip.conf"), Path("/etc/pip.conf")]
    files += [home / ".pip" / "pip.conf", home / ".config" / "pip" / "pip.conf"]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return files


def _pip_hosts() -> list[str]:
    hosts: list[str] = []
    configured = False
    for path in pip_config_files():
        parser = configparser.ConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (OSError, configparser.Error):
            continue
        for section in ("global", "install"):
            for key in ("index-url", "extra-index-url"):
                if parser.has_option(section, key):
                    found = _urls_hosts(parser.get(section, key))
                    hosts += found
                    configured = configured or (key == "index-url" and bool(found))
    for name in PIP_ENV:
        found = _urls_hosts(os.environ.get(name, ""))
        hosts += found
        configured = configured or (name == "PIP_INDEX_URL" and bool(found))
    return hosts if configured else [*DEFAULT_PIP_HOSTS, *hosts]


def _npm_hosts() -> list[str]:
    for name in NPM_ENV:
        if os.environ.get(name):
            return _urls_hosts(os.environ[name])
    for path in (Path.home() / ".npmrc", Path("/etc/npmrc"), Path("/usr/etc/npmrc")):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            key, sep, value = line.partition("=")
            if sep and key.strip() == "registry":
                return _urls_hosts(value.strip())
    return list(DEFAULT_NPM_HOSTS)


def _apt_hosts() -> list[str]:
    hosts: list[str] = []
    files = [Path("/etc/apt/sources.list")]
    folder = Path("/etc/apt/sources.list.d")
    if folder.is_dir():
        files += sorted(folder.iterdir())
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("URIs:"):
                hosts += _urls_hosts(line[5:])
            elif line.startswith(("deb ", "deb-src ")):
                hosts += _urls_hosts(" ".join(w for w in line.split()[1:] if "://" in w))
    return hosts or list(DEFAULT_APT_HOSTS)


def _registry_sources() -> tuple[object, ...]:
    """What :func:`registry_hosts` reads, as (path, mtime, size) of each file and the
    environment variables' values: the same tuple means the same hosts."""
    apt = Path("/etc/apt/sources.list.d")
    paths = [*pip_config_files(), Path.home() / ".npmrc", Path("/etc/npmrc")]
    paths += [Path("/usr/etc/npmrc"), Path("/etc/apt/sources.list"), apt]
    if apt.is_dir():
        paths += sorted(apt.iterdir())
    seen: list[object] = [os.environ.get(n) for n in (*PIP_ENV, *NPM_ENV)]
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            seen.append((str(path), None))
            continue
        seen.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(seen)


_REGISTRY_HOSTS: tuple[tuple[object, ...], list[str]] | None = None


def registry_hosts() -> list[str]:
    """The hosts pip, npm and apt use on this machine: pip's index URLs (pip.conf files and
    ``PIP_INDEX_URL``/``PIP_EXTRA_INDEX_URL``; PyPI and its file host when no index is set),
    npm's registry (``npm_config_registry``, ``.npmrc``; registry.npmjs.org by default) and
    apt's sources (sources.list and deb822 files). ``file://`` indexes are left out. Read
    again only when one of those files or variables changed (every trial's setup asks)."""
    global _REGISTRY_HOSTS
    sources = _registry_sources()
    if _REGISTRY_HOSTS is not None and _REGISTRY_HOSTS[0] == sources:
        return list(_REGISTRY_HOSTS[1])
    seen: dict[str, None] = {}
    for host in (*_pip_hosts(), *_npm_hosts(), *_apt_hosts()):
        seen.setdefault(host.lower(), None)
    _REGISTRY_HOSTS = (sources, list(seen))
    return list(seen)


def registry_env(*, on_host: bool = False) -> dict[str, str]:
    """Environment that points pip and npm inside a sandbox at the indexes configured here
    (http(s) only; a ``file://`` index on the host means nothing inside), or, ``on_host``,
    in a local sandbox (this machine's files and network): every ``PIP_*`` and
    ``npm_config_*`` setting of the harness's environment as given, and the user's own pip
    and npm configuration files (``PIP_CONFIG_FILE``, ``npm_config_userconfig``), which the
    local sandbox's private HOME hides. Its clean environment dropped them, and a task's
    warmup installed from the public registries, not this machine's (a new user's
    finding)."""
    if on_host:
        env = {
            k: v
            for k, v in os.environ.items()
            if k.startswith(("PIP_", "npm_config_", "NPM_CONFIG_"))
        }
        home = Path.home()
        user_pip = [p for p in pip_config_files()[2:4] if p.is_file()]
        if user_pip and "PIP_CONFIG_FILE" not in env:
            env["PIP_CONFIG_FILE"] = str(user_pip[-1])
        npmrc = home / ".npmrc"
        if npmrc.is_file() and not {"npm_config_userconfig", "NPM_CONFIG_USERCONFIG"} & env.keys():
            env["npm_config_userconfig"] = str(npmrc)
        return env
    env = {}
    for name in (*PIP_ENV, *NPM_ENV):
        urls = [
            u for u in os.environ.get(name, "").split() if u.startswith(("http://", "https://"))
        ]
        if urls:
            env[name] = " ".join(urls)
    return env
