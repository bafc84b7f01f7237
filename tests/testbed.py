"""A real multi-node cluster on one machine, for ddptui's tests.

Node i is a Linux network namespace whose ``eth0`` (``{subnet}.{i+1}/24``) sits on a
veth pair; the host side is enslaved to a bridge in the root namespace, which holds
``{subnet}.254`` (the "login node" the tests and ddptui run from).  Each node runs its
own OpenSSH sshd inside private UTS, mount and PID namespaces, so it has its own
hostname, its own ``/etc/hosts``, a masked ``/root/.bashrc`` and its own ``/proc``: a node
sees only its own processes (its sshd is pid 1 there), as a real machine does.  The
filesystem is otherwise shared: the test interpreter (``Testbed.python``) exists on every
node.  Pids in this module's API are pids of the root namespace (the login node's view);
``node_pid()``/``root_pid()`` translate.  Neighbour (ARP) tables between nodes start cold;
the nodes share the host kernel's neighbour-table limits, so testbeds of 16 nodes or more
raise them (``neighbour_room``) to what as many separate machines would have.

See ../shared/reference/testbed-notes.md for the traps this module works around.
Needs root, iproute2, util-linux (nsenter, unshare, setpriv), OpenSSH server and client;
arptables for block_arp().
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import ipaddress
import json
import os
import pwd
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

SSHD: Final = "/usr/sbin/sshd"  # absolute: sshd re-execs itself by argv[0] on SIGHUP
NETNS_DIR: Final = Path("/run/netns")
SYS_NET: Final = Path("/sys/class/net")  # interfaces of the root namespace (ours)
SSH_PORT: Final = 22
IFNAME_MAX: Final = 15  # kernel limit on interface names (IFNAMSIZ - 1)
LOCK_DIR: Final = Path(tempfile.gettempdir()) / "ddptui-testbed-locks"
NEIGH_SYSCTL: Final = Path("/proc/sys/net/ipv4/neigh/default")
NEIGH_ROOM_FROM: Final = 16  # nodes; smaller testbeds fit the kernel's default limits

# Deep-merge sentinel for config_dict(): an override with this value removes the key.
DELETE: Final = object()

_PREFIX_RE: Final = re.compile(r"^[a-z][a-z0-9-]*$")
_ENV_KEY_RE: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TestbedError(RuntimeError):
    """The testbed could not be brought up, used or torn down."""

    __test__ = False  # not a pytest test class despite the name


class TestbedBusy(TestbedError):
    """Another live testbed holds this prefix, bridge or subnet (nothing was touched)."""


class CommandFailed(subprocess.CalledProcessError):
    """CalledProcessError whose message carries stdout/stderr, for readable test failures."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstdout: {self.stdout!r}\nstderr: {self.stderr!r}"


@dataclass
class Node:
    index: int
    name: str  # display name used in cluster.yaml, e.g. "node0"
    hostname: str  # UTS hostname inside the node, e.g. "ddpt-node0"
    ns: str  # network namespace name
    ip: str
    sshd_pid: int  # root-namespace pid of the node's sshd (pid 1 inside the node)


def unavailable_reason() -> str | None:
    """Why this machine cannot run a testbed, or None if it can."""
    if os.geteuid() != 0:
        return "the testbed needs root (network namespaces, bridges, sshd)"
    if not Path(SSHD).is_file():
        return f"the testbed needs OpenSSH server at {SSHD}"
    for tool in ("ip", "nsenter", "unshare", "setpriv", "ssh", "ssh-keygen", "iptables"):
        if shutil.which(tool) is None:
            return f"the testbed needs {tool!r} on PATH"
    return None


# ---------------------------------------------------------------------------------------
# small process helpers


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    timeout: float = 30,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """subprocess.run with text I/O, captured output and readable failures."""
    proc = subprocess.run(
        list(argv),
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise CommandFailed(proc.returncode, proc.args, proc.stdout, proc.stderr)
    return proc


def is_alive(pid: int | str) -> bool:
    """Exists and is not a zombie (a killed, unreaped process still has a /proc entry)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rpartition(")")[2].split()[0]  # comm may contain spaces and ')'
    return state not in ("Z", "X")


NsId = tuple[int, int]  # (st_dev, st_ino) of a namespace file: its identity


def ns_id(pid: int | str, kind: str) -> NsId | None:
    """Identity of process pid's `kind` namespace ("net", "pid"), None if it is gone."""
    try:
        st = Path(f"/proc/{pid}/ns/{kind}").stat()
    except OSError:  # gone, or a kernel thread without namespaces
        return None
    return (st.st_dev, st.st_ino)


def ns_members(kind: str, targets: set[NsId]) -> list[int]:
    """Live pids (root-namespace numbers) whose `kind` namespace is one of `targets`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and ns_id(entry.name, kind) in targets and is_alive(entry.name):
            pids.append(int(entry.name))
    return sorted(pids)


def netns_pids(ns: str) -> list[int]:
    """Live pids whose network namespace is `ns`: what `ip netns pids` lists, minus zombies.

    Done in-process (same inode comparison as iproute2) because wait_quiet() polls it.
    """
    try:
        ns_stat = (NETNS_DIR / ns).stat()
    except FileNotFoundError:
        return []
    return ns_members("net", {(ns_stat.st_dev, ns_stat.st_ino)})


def child_pids(parents: set[int]) -> list[int]:
    """Live pids whose parent is in `parents` (this kernel has no /proc/PID/task/*/children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if int(fields[1]) in parents and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return sorted(found)


def nspid_chain(pid: int) -> list[int]:
    """The pid's number in each PID namespace, outermost (root) first ([] if gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return []
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return [int(x) for x in line.split()[1:]]
    return []


def describe_pid(pid: int) -> str:
    """`pid: command line` for an assertion message (the pid alone tells nothing)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"{pid}: (gone)"
    return f"{pid}: " + " ".join(a.decode(errors="replace") for a in argv if a)[:160]


def kill_and_wait(pids: Sequence[int], timeout: float = 5) -> list[int]:
    """SIGKILL each pid and wait until none is alive; return the survivors."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    left = [p for p in pids if is_alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = [p for p in left if is_alive(p)]
    return left


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _write_key_in_process(path: Path, comment: str) -> bool:
    """An ed25519 key pair in OpenSSH format, written without a process (65 ssh-keygen
    runs cost seconds on a loaded 2-core machine); False when asyncssh is missing."""
    try:
        import asyncssh  # the venv's; ssh-keygen is the fallback
    except ImportError:
        return False
    key = asyncssh.generate_private_key("ssh-ed25519", comment=comment)
    key.write_private_key(str(path))
    path.chmod(0o600)
    key.write_public_key(str(path.with_name(path.name + ".pub")))
    return True


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def tcp_connects(ip: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def sshd_version() -> tuple[int, int]:
    """OpenSSH version of the server binary (e.g. (9, 2)); (0, 0) if it cannot be told."""
    out = subprocess.run([SSHD, "-V"], capture_output=True, text=True, check=False)
    m = re.search(r"OpenSSH_(\d+)\.(\d+)", out.stderr + out.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def sshd_setenv_line(env: Mapping[str, str]) -> str:
    """ONE SetEnv line (sshd honours only the first): each K=V double-quoted per
    sshd_config's argv rules, where only backslash and double quote need escaping."""
    words = []
    for key, value in env.items():
        if not _ENV_KEY_RE.match(key):
            raise ValueError(f"bad environment variable name {key!r}")
        if "\n" in value or "\r" in value or "\0" in value:
            raise ValueError(f"environment value for {key} must be a single line")
        escaped = f"{key}={value}".replace("\\", "\\\\").replace('"', '\\"')
        words.append(f'"{escaped}"')
    return "SetEnv " + " ".join(words) if words else ""


def unlocked_root_shadow(shadow: str) -> str | None:
    """With UsePAM no, sshd refuses every login (keys included) to an account whose
    password starts with '!' (locked, as `passwd -l` leaves it).  If root is locked in
    `shadow`, return a copy with root's password '*' (no password, not locked), to be
    bind-mounted in the nodes' private mount namespaces; None when no override is needed."""
    lines = shadow.splitlines(keepends=True)
    for k, line in enumerate(lines):
        fields = line.split(":")
        if fields[0] == "root" and len(fields) > 1 and fields[1].startswith("!"):
            fields[1] = "*"
            lines[k] = ":".join(fields)
            return "".join(lines)
    return None


def neighbour_room(n: int) -> dict[str, int]:
    """Host gc_thresh2/3 that n nodes need when all of them talk to each other.

    Real nodes each have their own neighbour (ARP) table, 1024 entries by default.  The
    testbed's nodes are namespaces of ONE kernel, whose table and gc_thresh3 count the
    entries of all namespaces together: 64 nodes in a full mesh hold 64 * 63 entries and
    the kernel refuses the rest ("neighbour table overflow"), a fault no real 64-node
    cluster has.  {} when n is small enough for the defaults."""
    if n < NEIGH_ROOM_FROM:
        return {}
    need = (n + 1) ** 2  # every node and the login node, each an entry in every other
    return {"gc_thresh2": 512 + need, "gc_thresh3": 1024 + 2 * need}


def ensure_neighbour_room(n: int) -> None:
    """Raise (never lower: other testbeds may rely on it) the host's neighbour-table
    limits to neighbour_room(n), so n nodes behave like n machines.  The tables
    themselves are untouched: they start cold."""
    for name, value in neighbour_room(n).items():
        path = NEIGH_SYSCTL / name
        try:
            if int(path.read_text()) < value:
                path.write_text(f"{value}\n")
        except (OSError, ValueError) as exc:
            raise TestbedError(
                f"a {n}-node testbed needs net.ipv4.neigh.default.{name} >= {value} (its nodes "
                f"share this kernel's neighbour table) and it could not be set: {exc}"
            ) from exc


def deep_merge(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of base with overrides merged into nested dicts; DELETE removes a key."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# ---------------------------------------------------------------------------------------


class Testbed:
    """n nodes, each a netns + private UTS/mount namespaces + its own sshd.

    Use as ``with Testbed(3) as tb:`` or ``tb = Testbed(3).up(); ...; tb.down()``.
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(
        self,
        n: int = 3,
        *,
        prefix: str = "ddpt",
        subnet: str = "10.77.0",
        workdir: Path | None = None,
        env: dict[int, dict[str, str]] | None = None,
        hosts: dict[int, str] | None = None,
        bridge: str | None = None,
        neigh_room: bool = True,
    ) -> None:
        if not 1 <= n <= 253:
            raise ValueError("a testbed has 1..253 nodes")
        if not _PREFIX_RE.match(prefix):
            raise ValueError(f"prefix {prefix!r}: lowercase letters, digits and '-' only")
        net = ipaddress.ip_network(f"{subnet}.0/24")  # validates the three octets
        self.n = n
        self.prefix = prefix
        self.subnet = subnet
        self.bridge = bridge or f"{prefix}-br"
        if len(self.bridge) > IFNAME_MAX or len(self._veth(n - 1)) > IFNAME_MAX:
            raise ValueError(f"prefix {prefix!r} too long for {IFNAME_MAX}-char interface names")
        self.host_ip = f"{subnet}.254"
        self._network = net
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"{prefix}-tb-"))
        self.client_key = self.workdir / "client_key"
        self.known_hosts = self.workdir / "known_hosts"
        self.ssh_config = self.workdir / "ssh_config"  # deliberately empty
        self.python = sys.executable
        self.nodes: list[Node] = []
        self._env: dict[int, dict[str, str]] = {i: dict((env or {}).get(i, {})) for i in range(n)}
        self._initial_hosts = dict(hosts or {})
        self._sshd: dict[int, subprocess.Popen[bytes]] = {}  # the nodes' unshare launchers
        self._pidns: dict[int, NsId | None] = {}
        self._holders: list[subprocess.Popen[str]] = []
        self._lock_fds: list[int] = []
        self._is_up = False
        self._neigh_room = neigh_room

    # -- naming -----------------------------------------------------------------------

    def _ns(self, i: int) -> str:
        return f"{self.prefix}-n{i}"

    def _veth(self, i: int) -> str:
        return f"{self.prefix}-v{i}"

    def _ip(self, i: int) -> str:
        return f"{self.subnet}.{i + 1}"

    def _node_dir(self, i: int) -> Path:
        return self.workdir / f"node{i}"

    def _owns_ns(self, name: str) -> bool:
        return re.fullmatch(rf"{re.escape(self.prefix)}-n\d+", name) is not None

    def _owns_link(self, name: str) -> bool:
        veth = re.fullmatch(rf"{re.escape(self.prefix)}-v\d+", name)
        return name == self.bridge or veth is not None

    # -- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> Testbed:
        return self.up()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()

    def up(self) -> Testbed:
        if self._is_up:
            return self
        try:
            self._acquire_locks()  # raises TestbedBusy before touching anything
            self._purge()  # leftovers of a crashed run with the same prefix
            self._check_subnet_free()
            self._bring_up()
        except BaseException:
            self.down()
            raise
        return self

    def _bring_up(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privsep dir
        keygens = self._start_keygens()  # overlaps with the network setup
        if self._neigh_room:
            ensure_neighbour_room(self.n)
        self._create_network()
        for proc in keygens:
            if proc.wait(timeout=30) != 0:
                raise TestbedError(f"ssh-keygen failed: {proc.args!r}")
        self._write_shared_files()
        for i in range(self.n):
            self._write_node_files(i)
        self._start_sshds()
        self._wait_listening()
        self._write_known_hosts()
        self._is_up = True
        # The readiness probes each made sshd fork a pre-auth child; let those exit so a
        # fresh testbed reports pids(i) == [] and tests can assert "nothing left".
        self._wait_all_quiet(timeout=10)

    def down(self) -> None:
        """Stop everything this testbed started and delete its namespaces and links.

        Idempotent, and safe after a partial up(): it works from the prefix, not from
        what up() managed to record.  Raises at the end if something could not be removed.
        """
        try:
            if self._lock_fds:  # else we never owned these names: touch nothing
                self._is_up = False
                self._stop_holders()
                self._stop_sshds()
                self._purge()
        finally:
            self._release_locks()
            self._sshd.clear()  # self.nodes stays, for post-mortem asserts on pids
            if self._own_workdir:  # even if up() never got its locks: mkdtemp made it
                shutil.rmtree(self.workdir, ignore_errors=True)

    def clean_leftovers(self) -> None:
        """Remove what a crashed run with this prefix left (up() does this by itself).
        Raises TestbedBusy, touching nothing, if a live testbed holds the prefix."""
        try:
            self._acquire_locks()
            self._purge()
        finally:
            self._release_locks()
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)

    # -- locks: two testbeds (or two pytest runs) must never share names or subnets ----

    def _acquire_locks(self) -> None:
        LOCK_DIR.mkdir(mode=0o755, exist_ok=True)
        for key in (f"prefix-{self.prefix}", f"bridge-{self.bridge}", f"subnet-{self.subnet}"):
            fd = os.open(LOCK_DIR / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self._release_locks()
                raise TestbedBusy(f"testbed {key} is held by another live testbed") from None
            self._lock_fds.append(fd)

    def _release_locks(self) -> None:
        for fd in self._lock_fds:
            os.close(fd)  # closing the descriptor drops the flock
        self._lock_fds.clear()

    def _check_subnet_free(self) -> None:
        """Refuse a subnet that an interface outside this testbed already uses."""
        out = run(["ip", "-4", "-o", "addr", "show"]).stdout
        for line in out.splitlines():
            fields = line.split()
            iface = fields[1]
            addr = ipaddress.ip_interface(fields[3])
            if addr.network.overlaps(self._network) and not self._owns_link(iface):
                raise TestbedBusy(f"subnet {self._network} overlaps {addr} on {iface}")

    # -- network ----------------------------------------------------------------------

    def _create_network(self) -> None:
        # One `ip -batch` for the root namespace: namespaces, bridge and veth pairs.
        root = [f"netns add {self._ns(i)}" for i in range(self.n)]
        root += [
            f"link add {self.bridge} type bridge",
            # Bridged frames must not traverse the host firewall (br_netfilter).
            f"link set {self.bridge} type bridge nf_call_iptables 0 nf_call_ip6tables 0"
            " nf_call_arptables 0",
            f"addr add {self.host_ip}/24 dev {self.bridge}",
            f"link set {self.bridge} up",
        ]
        for i in range(self.n):
            root.append(f"link add {self._veth(i)} type veth peer name eth0 netns {self._ns(i)}")
            root.append(f"link set {self._veth(i)} master {self.bridge} up")
        run(["ip", "-batch", "-"], input="\n".join(root) + "\n")
        # Each node's own interfaces are configured by its start script (_node_script),
        # inside the node and in parallel: 64 `ip` processes spawned from this process
        # one by one cost seconds on a loaded machine.
        for i in range(self.n):
            self._node_dir(i).mkdir(parents=True, exist_ok=True)
            (self._node_dir(i) / "net.batch").write_text(
                f"link set lo up\naddr add {self._ip(i)}/24 dev eth0\nlink set eth0 up\n"
            )

    def _purge(self) -> None:
        """Kill every process in this prefix's namespaces, delete its links and namespaces."""
        namespaces = [name for name in _names(NETNS_DIR) if self._owns_ns(name)]
        ids = set()
        for ns in namespaces:  # one pass over /proc for all nodes, not one per node
            with contextlib.suppress(FileNotFoundError):
                st = (NETNS_DIR / ns).stat()
                ids.add((st.st_dev, st.st_ino))
        in_netns = ns_members("net", ids) if ids else []
        # ...and everything in those nodes' PID namespaces (the launchers sit in the root
        # one: never that).  SIGKILL of a node's sshd (its pid 1) would take its namespace
        # down anyway; killing all by pid also covers a node whose pid 1 is already gone.
        root_pidns = ns_id("self", "pid")
        node_pidns = {ns_id(p, "pid") for p in in_netns} - {root_pidns, None}
        members = ns_members("pid", {x for x in node_pidns if x is not None})
        survivors = kill_and_wait(sorted(set(in_netns) | set(members)))
        for proc in self._sshd.values():  # reap ours so they do not stay zombies
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
        links = [name for name in _names(SYS_NET) if self._owns_link(name)]
        # Deleting the host end of a veth deletes the pair synchronously, whereas
        # `netns del` frees the namespace (and its eth0) asynchronously: delete links
        # first so the names can be reused at once.
        cmds = [f"link del {name}" for name in links if name != self.bridge]
        cmds += [f"link del {self.bridge}"] if self.bridge in links else []
        cmds += [f"netns del {ns}" for ns in namespaces]
        if cmds:
            run(["ip", "-force", "-batch", "-"], input="\n".join(cmds) + "\n", check=False)
        left_ns = [ns for ns in namespaces if (NETNS_DIR / ns).exists()]
        left_links = [name for name in links if (SYS_NET / name).exists()]
        if survivors or left_ns or left_links:
            raise TestbedError(
                f"teardown of {self.prefix!r} left pids={survivors} netns={left_ns}"
                f" links={left_links}"
            )

    # -- files ------------------------------------------------------------------------

    def _start_keygens(self) -> list[subprocess.Popen[bytes]]:
        jobs = [(self.client_key, "ddptui-testbed-client")]
        for i in range(self.n):
            self._node_dir(i).mkdir(parents=True, exist_ok=True)
            jobs.append((self._node_dir(i) / "host_key", f"{self.prefix}-node{i}"))
        procs = []
        for path, comment in jobs:
            for stale in (path, path.with_name(path.name + ".pub")):
                stale.unlink(missing_ok=True)  # ssh-keygen would prompt to overwrite
            if _write_key_in_process(path, comment):
                continue
            procs.append(
                subprocess.Popen(
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                )
            )
        return procs

    def _write_shared_files(self) -> None:
        pub = self.client_key.with_name("client_key.pub").read_text()
        (self.workdir / "authorized_keys").write_text(pub)
        self.ssh_config.write_text("")
        (self.workdir / "empty_bashrc").write_text("")
        try:
            shadow = unlocked_root_shadow(Path("/etc/shadow").read_text())
        except OSError:
            shadow = None
        if shadow is not None:
            (self.workdir / "shadow").write_text(shadow)
            (self.workdir / "shadow").chmod(0o640)

    def default_hosts(self, i: int) -> str:
        """The /etc/hosts a healthy node gets: localhost, the login node and every node's
        hostname (so gloo can resolve names even without GLOO_SOCKET_IFNAME)."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines.append(f"{self.host_ip}\t{self.prefix}-login")
        lines += [f"{self._ip(k)}\t{self.prefix}-node{k}" for k in range(self.n)]
        return "\n".join(lines) + "\n"

    def _write_node_files(self, i: int) -> None:
        d = self._node_dir(i)
        (d / "hosts").write_text(self._initial_hosts.get(i, self.default_hosts(i)))
        (d / "sshd_config").write_text(self._sshd_config(i))

    def _sshd_config(self, i: int) -> str:
        d = self._node_dir(i)
        lines = [
            f"ListenAddress {self._ip(i)}",
            f"Port {SSH_PORT}",
            f"HostKey {d / 'host_key'}",
            f"PidFile {d / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "StrictModes no",  # keys live under a world-writable /tmp
            "UsePAM no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "MaxStartups 100:30:200",  # default 10:30:100 drops parallel connects
            "MaxSessions 64",
            "LogLevel INFO",  # set_env() waits for the "Server listening" line
            "Subsystem sftp internal-sftp",
        ]
        if sshd_version() >= (9, 8):
            # Newer sshd penalises a source address after failed auths; the login node
            # makes deliberately failing connections in tests.
            lines.append("PerSourcePenalties no")
        setenv = sshd_setenv_line(self._env[i])
        if setenv:
            lines.append(setenv)
        return "\n".join(lines) + "\n"

    def _write_known_hosts(self) -> None:
        lines = []
        for node in self.nodes:
            pub = (self._node_dir(node.index) / "host_key.pub").read_text()
            key_type, key_b64 = pub.split()[:2]  # drop the comment
            lines.append(f"{node.ip} {key_type} {key_b64}")
        self.known_hosts.write_text("\n".join(lines) + "\n")

    # -- sshd -------------------------------------------------------------------------

    def _node_script(self, i: int) -> str:
        """The shell run inside node i's fresh UTS+mount namespaces before exec'ing sshd."""
        d = self._node_dir(i)
        q = shlex.quote
        steps = [f"ip -batch {q(str(d / 'net.batch'))}", f"hostname {q(f'{self.prefix}-node{i}')}"]
        bashrc = Path(pwd.getpwnam("root").pw_dir) / ".bashrc"
        if bashrc.exists():
            # Debian's bash sources ~/.bashrc for ssh commands; here it runs `pyenv init`
            # (slow, and its shims shadow PATH).  Nodes get an empty one.
            steps.append(f"mount --bind {q(str(self.workdir / 'empty_bashrc'))} {q(str(bashrc))}")
        steps.append(f"mount --bind {q(str(d / 'hosts'))} /etc/hosts")
        if (self.workdir / "shadow").exists():
            steps.append(f"mount --bind {q(str(self.workdir / 'shadow'))} /etc/shadow")
        steps.append(f"exec {SSHD} -D -f {q(str(d / 'sshd_config'))} -E {q(str(d / 'sshd.log'))}")
        return " && ".join(steps)

    def _start_sshds(self) -> None:
        # `ip netns exec` execs `unshare`, which forks the node's pid 1: `sh -c '... &&
        # exec sshd -D'` (foreground), with a fresh /proc mounted in the node's mount
        # namespace.  Popen.pid is the unshare launcher (root PID namespace; we reap it);
        # sshd's own pid is found once it listens.  --kill-child: if the launcher dies,
        # sshd gets SIGKILL, and with it (as pid 1) every process of the node.
        self.nodes = []
        for i in range(self.n):
            argv = [
                "ip",
                "netns",
                "exec",
                self._ns(i),
                "unshare",
                "--uts",
                "--mount",
                "--propagation",
                "private",
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
                "sh",
                "-c",
                self._node_script(i),
            ]
            with (self._node_dir(i) / "start.log").open("wb") as log:
                self._sshd[i] = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,  # keep terminal signals (^C) away from it
                )
            self.nodes.append(
                Node(
                    index=i,
                    name=f"node{i}",
                    hostname=f"{self.prefix}-node{i}",
                    ns=self._ns(i),
                    ip=self._ip(i),
                    sshd_pid=0,  # known once it listens (_wait_listening)
                )
            )

    def _wait_listening(self, timeout: float = 15) -> None:
        pending = set(range(self.n))
        deadline = time.monotonic() + timeout
        while pending:
            for i in sorted(pending):
                self._check_sshd_running(i)
                # Its log first: before its start script has configured eth0, a connect
                # to the address would wait for ARP instead of being refused at once.
                log = self._node_dir(i) / "sshd.log"
                if not (log.exists() and b"Server listening on" in log.read_bytes()):
                    continue
                if tcp_connects(self._ip(i), SSH_PORT, timeout=0.5):
                    pending.discard(i)
            if pending and time.monotonic() > deadline:
                raise TestbedError(f"sshd did not listen on nodes {sorted(pending)} in {timeout}s")
            if pending:
                time.sleep(0.005)
        launchers = {self._sshd[i].pid: i for i in range(self.n)}
        for pid in child_pids(set(launchers)):
            self.nodes[launchers[_ppid(pid)]].sshd_pid = pid
        for node in self.nodes:  # guard "the launcher's only child is sshd, pid 1 inside"
            exe = str(Path(f"/proc/{node.sshd_pid}/exe").readlink()) if node.sshd_pid else "?"
            if exe != SSHD or nspid_chain(node.sshd_pid)[-1:] != [1]:
                raise TestbedError(f"pid {node.sshd_pid} of {node.name} is {exe}, not {SSHD}")
        self._pidns = {n.index: ns_id(n.sshd_pid, "pid") for n in self.nodes}

    def _check_sshd_running(self, i: int) -> None:
        proc = self._sshd[i]
        if proc.poll() is not None:
            d = self._node_dir(i)
            logs = "".join(
                f"\n--- {p.name}:\n{p.read_text(errors='replace')}"
                for p in (d / "start.log", d / "sshd.log")
                if p.exists()
            )
            raise TestbedError(f"sshd of node{i} exited with {proc.returncode}{logs}")

    def _stop_sshds(self) -> None:
        # SIGTERM to sshd itself: the unshare launcher blocks SIGTERM.  When sshd (pid 1
        # of its node) exits, the kernel kills the rest of the node.
        for node in self.nodes:
            if node.sshd_pid and node.index in self._sshd and self._sshd[node.index].poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.sshd_pid, signal.SIGTERM)
        for proc in self._sshd.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)  # _purge() SIGKILLs whatever is still there

    def _stop_holders(self) -> None:
        for proc in self._holders:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        self._holders.clear()

    # -- running things on nodes ------------------------------------------------------

    def _require_up(self) -> None:
        if not self._is_up:
            raise TestbedError("testbed is not up")

    def nsenter_argv(self, i: int, argv: Sequence[str], *, cwd: str | None = None) -> list[str]:
        """argv that runs inside node i's network, UTS, mount and PID namespaces.

        nsenter forks to enter the PID namespace; the command gets SIGKILL when that
        nsenter dies, so killing the returned Popen still stops the command.
        """
        self._require_up()
        enter = ["nsenter", "-t", str(self.nodes[i].sshd_pid), "-n", "-u", "-m", "-p"]
        # Entering a mount namespace resets the cwd to "/": keep the caller's (the
        # filesystem is shared, so it exists in the node too).
        enter.append(f"--wd={cwd or Path.cwd()}")
        return [*enter, "--", "setpriv", "--pdeathsig", "KILL", "--", *argv]

    def exec(
        self,
        i: int,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 30,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv inside node i (its netns, hostname and /etc/hosts).

        It inherits this process's environment, not the node's SetEnv (that is ssh-only).
        """
        return run(self.nsenter_argv(i, argv), check=check, timeout=timeout, input=input)

    def pids(self, i: int) -> list[int]:
        """Live processes in node i (root-namespace pids), except the testbed's own: its
        sshd listener, its launcher and hold_port() listeners.

        A process is in node i when it is in the node's PID namespace (all that ssh
        starts) or its network namespace.  Per-connection sshd children of an open
        session are included: they are real leftovers until the session closes.
        """
        self._require_up()
        holders = {p.pid for p in self._holders if p.poll() is None}
        ours = {self.nodes[i].sshd_pid, self._sshd[i].pid} | holders
        ours |= set(child_pids(holders)) if holders else set()
        try:
            st = (NETNS_DIR / self._ns(i)).stat()
        except FileNotFoundError:
            return []
        netns, pidns = (st.st_dev, st.st_ino), self._pidns.get(i)
        inside = []
        for entry in Path("/proc").iterdir():  # one pass: wait_quiet() polls this
            name = entry.name
            if (
                name.isdigit()
                and int(name) not in ours
                and (ns_id(name, "net") == netns or ns_id(name, "pid") == pidns)
                and is_alive(name)
            ):
                inside.append(int(name))
        return sorted(inside)

    def node_pid(self, pid: int) -> int | None:
        """The number a node's own /proc shows for root-namespace `pid` (None if gone)."""
        chain = nspid_chain(pid)
        return chain[-1] if chain else None

    def root_pid(self, i: int, node_pid: int) -> int | None:
        """The root-namespace pid of the process node i knows as `node_pid`, or None."""
        self._require_up()
        pidns = self._pidns.get(i)
        for pid in ns_members("pid", {pidns} if pidns else set()):
            if nspid_chain(pid)[-1:] == [node_pid]:
                return pid
        return None

    def _wait_all_quiet(self, timeout: float) -> None:
        """wait_quiet() for every node at once: one pass over /proc per poll."""
        netns = {}
        for i in range(self.n):
            st = (NETNS_DIR / self._ns(i)).stat()
            netns[(st.st_dev, st.st_ino)] = i
        pidns = {x: i for i, x in self._pidns.items() if x is not None}
        ours = {n.sshd_pid for n in self.nodes} | {p.pid for p in self._sshd.values()}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = [
                entry.name
                for entry in Path("/proc").iterdir()
                if entry.name.isdigit()
                and int(entry.name) not in ours
                and (ns_id(entry.name, "net") in netns or ns_id(entry.name, "pid") in pidns)
                and is_alive(entry.name)
            ]
            if not busy:
                return
            time.sleep(0.02)

    def wait_quiet(self, i: int, timeout: float = 10) -> list[int]:
        """Poll pids(i) until it is empty or timeout; return what is left."""
        deadline = time.monotonic() + timeout
        while (left := self.pids(i)) and time.monotonic() < deadline:
            time.sleep(0.02)
        return left

    # -- faults (all undoable, all gone after down()) ---------------------------------

    def iptables(self, i: int, *args: str) -> None:
        """Run `iptables ARGS` in node i's netns; rules die with the namespace.

        Name `-i eth0` on INPUT rules, or they also cut the node's loopback traffic.
        """
        self._require_up()
        run(["ip", "netns", "exec", self._ns(i), "iptables", "-w", *args])

    def link_down(self, i: int) -> None:
        self._require_up()
        run(["ip", "-n", self._ns(i), "link", "set", "eth0", "down"])

    def link_up(self, i: int) -> None:
        """Bring eth0 back; the kernel restores the connected route with the link."""
        self._require_up()
        run(["ip", "-n", self._ns(i), "link", "set", "eth0", "up"])

    def slow_node(self, i: int, rate: str = "50mbit") -> None:
        """Node i's link runs at `rate` both ways (tbf on its host-side veth and on its
        eth0): a slow NIC, port or cable. Gone with the namespace."""
        self._require_up()
        tbf = ["root", "tbf", "rate", rate, "burst", "64kb", "latency", "200ms"]
        run(["tc", "qdisc", "add", "dev", self._veth(i), *tbf])
        run(["ip", "netns", "exec", self._ns(i), "tc", "qdisc", "add", "dev", "eth0", *tbf])

    def slow_link(self, a: int, b: int, rate: str = "50mbit") -> None:
        """Only traffic between nodes a and b runs at `rate` (htb + a u32 filter on the
        peer's address, inside both): a bad path between two otherwise fast nodes."""
        self._require_up()
        for me, peer in ((a, b), (b, a)):
            tc = ["ip", "netns", "exec", self._ns(me), "tc"]
            run([*tc, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10"])
            run([*tc, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb",
                 "rate", "20gbit"])
            run([*tc, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:30", "htb",
                 "rate", rate])
            run([*tc, "filter", "add", "dev", "eth0", "protocol", "ip", "parent", "1:0", "prio",
                 "1", "u32", "match", "ip", "dst", f"{self._ip(peer)}/32", "flowid", "1:30"])

    def set_hosts(self, i: int, text: str) -> None:
        """Replace node i's /etc/hosts (restore with set_hosts(i, tb.default_hosts(i))).

        Rewritten in place: the node's bind mount pins the inode, so a rename would not be
        seen.  The root namespace's /etc/hosts is never touched.
        """
        self._require_up()
        with (self._node_dir(i) / "hosts").open("r+") as f:
            f.truncate(0)
            f.write(text)

    def block_port(
        self, i: int, port: int = 29500, target: str = "DROP", reject_with: str = "tcp-reset"
    ) -> None:
        """Node i's firewall drops (or rejects, answering `reject_with`) TCP to `port`
        arriving on eth0: the classic blocked MASTER_PORT. Its own loopback traffic is
        untouched."""
        extra = ["--reject-with", reject_with] if target == "REJECT" else []
        self.iptables(
            i, "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(port), "-j", target, *extra
        )

    def block_peer(self, dst: int, src: int, except_port: int = 29500) -> None:
        """Node dst drops new TCP connections from node src on every port but `except_port`
        (MASTER_PORT stays open): the pair NCCL/gloo need is cut, the store is not."""
        self.iptables(
            dst,
            "-A",
            "INPUT",
            "-i",
            "eth0",
            "-s",
            self.nodes[src].ip,
            "-p",
            "tcp",
            "--syn",
            "!",
            "--dport",
            str(except_port),
            "-j",
            "DROP",
        )

    def block_arp(self, dst: int, src: int) -> None:
        """Node dst ignores ARP from node src (arptables): src's neighbour entry for dst
        never resolves, TCP never starts.  Not a TCP firewall: the fault that looks like
        one from the outside."""
        self._require_up()
        run(
            [
                "ip",
                "netns",
                "exec",
                self._ns(dst),
                "arptables",
                "-A",
                "INPUT",
                "-s",
                self.nodes[src].ip,
                "-j",
                "DROP",
            ]
        )

    def hold_port(self, i: int, port: int, addr: str = "0.0.0.0") -> subprocess.Popen[str]:  # noqa: S104
        """Start a listener on addr:port inside node i and return once it listens.

        It accepts and keeps connections without ever answering (like a foreign service on
        MASTER_PORT).  Undo with proc.kill(); down() kills it anyway.  pids(i) ignores it.
        """
        self._require_up()
        proc = subprocess.Popen(
            self.nsenter_argv(i, [self.python, "-c", _HOLDER, addr, str(port)]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self._holders.append(proc)
        assert proc.stdout is not None  # narrowing for mypy
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        line = proc.stdout.readline() if ready else ""
        if line.strip() != "ready":
            proc.kill()
            _, err = proc.communicate()
            raise TestbedError(f"hold_port({i}, {port}, {addr!r}) failed: {err.strip()}")
        return proc

    def holder_pid(self, proc: subprocess.Popen[str]) -> int:
        """The pid node i's own /proc shows for the listener of a hold_port() result
        (proc.pid is the nsenter that started it, in the login node's namespace)."""
        children = child_pids({proc.pid})
        node_pid = self.node_pid(children[0]) if children else None
        if node_pid is None:
            raise TestbedError(f"hold_port listener of pid {proc.pid} is gone")
        return node_pid

    def set_env(self, i: int, env: dict[str, str]) -> None:
        """Replace node i's SetEnv environment.  New ssh sessions see it; open ones keep
        the old one.  SIGHUP makes sshd re-exec (same pid) and re-read its config."""
        self._require_up()
        self._env[i] = dict(env)
        d = self._node_dir(i)
        (d / "sshd_config").write_text(self._sshd_config(i))
        log = d / "sshd.log"
        offset = log.stat().st_size
        os.kill(self.nodes[i].sshd_pid, signal.SIGHUP)
        # Wait for the re-exec'd sshd's own "listening" line: a TCP probe could still hit
        # the old socket before the signal is handled.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with log.open("rb") as f:
                f.seek(offset)
                if b"Server listening on" in f.read():
                    return
            self._check_sshd_running(i)
            time.sleep(0.005)
        raise TestbedError(f"sshd of node{i} did not listen again after SIGHUP")

    # -- client side ------------------------------------------------------------------

    def ssh_argv(
        self, i: int, command: str, *, options: Mapping[str, str] | None = None
    ) -> list[str]:
        """OpenSSH client argv running `command` as root on node i.

        `options` (-o Key=Value) come first, and ssh keeps the first value it sees, so
        they override the defaults (e.g. {"UserKnownHostsFile": "/dev/null"}).
        """
        self._require_up()
        opts = dict(options or {})
        for key, value in {
            "BatchMode": "yes",
            "StrictHostKeyChecking": "yes",
            "UserKnownHostsFile": str(self.known_hosts),
            "GlobalKnownHostsFile": "/dev/null",
            "IdentitiesOnly": "yes",
            "ConnectTimeout": "5",
            "LogLevel": "ERROR",
        }.items():
            opts.setdefault(key, value)
        # -F /dev/null: ignore ~/.ssh/config and keep ssh from creating ~/.ssh.
        argv = ["ssh", "-F", "/dev/null", "-i", str(self.client_key)]
        for key, value in opts.items():
            argv += ["-o", f"{key}={value}"]
        return [*argv, "-p", str(SSH_PORT), f"root@{self.nodes[i].ip}", command]

    def config_dict(self, **overrides: Any) -> dict[str, Any]:
        """A ddptui cluster.yaml as a dict; overrides are deep-merged (DELETE drops a key)."""
        base: dict[str, Any] = {
            "name": f"testbed-{self.prefix}",
            "master": {"addr": self._ip(0), "port": 29500},
            "nodes": [
                {"host": n.ip, "name": n.name, "user": "root", "port": SSH_PORT} for n in self.nodes
            ],
            "nproc_per_node": 1,
            "python": self.python,
            "env": {"GLOO_SOCKET_IFNAME": "eth0"},
            "ssh": {
                "known_hosts": str(self.known_hosts),
                "identity_file": str(self.client_key),
                "config": str(self.ssh_config),
                "connect_timeout": 5,
            },
            "timeouts": {"step": 20, "allreduce": 60},
        }
        return deep_merge(base, overrides)

    def write_config(self, path: Path | None = None, **overrides: Any) -> Path:
        """Write config_dict(**overrides) as YAML (JSON is valid YAML) and return the path."""
        path = path or self.workdir / "cluster.yaml"
        path.write_text(json.dumps(self.config_dict(**overrides), indent=2) + "\n")
        return path


# Runs inside a node for hold_port(): argv = [addr, port].
_HOLDER: Final = """
import socket, sys
addr, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port))
s.listen(128)
print("ready", flush=True)
held = []
while True:
    held.append(s.accept()[0])
"""


def start_testbed(
    n: int = 3,
    *,
    stem: str = "ddpt",
    subnet_base: str = "10.78",
    slots: int = 200,
    **kwargs: Any,
) -> Testbed:
    """Bring up a testbed on the first free slot k: prefix f"{stem}{k}", subnet
    f"{subnet_base}.{k}".  Slots are flock()ed, so parallel testbeds (in this process or
    in concurrent pytest runs) never collide, and a slot left by a crashed run is purged
    when it is next taken.  An explicit prefix/subnet in kwargs bypasses the search."""
    if "prefix" in kwargs or "subnet" in kwargs:
        return Testbed(n, **kwargs).up()
    for k in range(slots):
        try:
            return Testbed(n, prefix=f"{stem}{k}", subnet=f"{subnet_base}.{k}", **kwargs).up()
        except TestbedBusy:
            continue
    raise TestbedBusy(f"all {slots} testbed slots are in use")


def iter_leftovers(prefix: str) -> Iterator[str]:
    """Namespaces and links in the root namespace that belong to `prefix` (for checks)."""
    pattern = re.compile(rf"{re.escape(prefix)}-(n|v)\d+|{re.escape(prefix)}-br")
    yield from (f"netns:{x}" for x in _names(NETNS_DIR) if pattern.fullmatch(x))
    yield from (f"link:{x}" for x in _names(SYS_NET) if pattern.fullmatch(x))
