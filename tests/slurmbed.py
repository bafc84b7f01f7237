"""A real Slurm on a namespace testbed (see ../shared/reference/testbed-notes.md).

    tb = start_testbed(4)
    with SlurmCluster(tb) as slurm:          # slurmctld on the bridge, one slurmd per node
        job = slurm.allocate(4)              # a running job holding the 4 nodes
        slurm.env                            # SLURM_CONF for srun/sbatch/ddptui

slurmctld runs in the root network namespace in its own UTS namespace (it refuses to
run on a host not named SlurmctldHost) and listens on the bridge address; slurmd runs
inside each node's namespaces (nsenter), after a tmpfs /sys/fs/cgroup is mounted in the
node's mount namespace. Per testbed: the cluster name, the controller port, the state,
spool, pid and log files, so two testbeds with Slurm coexist. stop() ends every daemon
and job it started. Needs slurm-wlm and a running munged (scripts/setup --test).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from testbed import Testbed, TestbedError, kill_and_wait

SLURMCTLD: Final = "/usr/sbin/slurmctld"
SLURMD: Final = "/usr/sbin/slurmd"
MUNGE_SOCKET: Final = Path("/run/munge/munge.socket.2")
CGROUPS: Final = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "pids")


def slurm_unavailable() -> str | None:
    for exe in (SLURMCTLD, SLURMD):
        if not Path(exe).exists():
            return f"{exe} missing (scripts/setup --test installs slurm-wlm)"
    for cmd in ("srun", "sbatch", "scontrol", "scancel"):
        if shutil.which(cmd) is None:
            return f"{cmd} not on PATH (slurm-client)"
    if not MUNGE_SOCKET.exists():
        return "munged is not running (scripts/setup --test starts it)"
    # a socket left by a munged that is gone answers nothing: slurmd would start and
    # never register, and the fixture would time out on "nodes not idle"
    probe = subprocess.run(["munge", "-n"], stdin=subprocess.DEVNULL, capture_output=True)
    if probe.returncode != 0:
        return f"munged does not answer on {MUNGE_SOCKET} (scripts/setup --test restarts it)"
    return None


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


class SlurmCluster:
    __test__ = False

    def __init__(self, tb: Testbed, *, cpus: int = 2) -> None:
        self.tb = tb
        self.cpus = cpus
        self.dir = tb.workdir / "slurm"
        self.conf = self.dir / "slurm.conf"
        self.name = re.sub(r"[^a-z0-9]", "", tb.prefix)[:30] or "ddptui"
        self.ctl_host = f"ctl-{self.name}"
        self.port = 0
        self.node_names = [f"{tb.prefix}-node{i}" for i in range(tb.n)]
        self._ctld: subprocess.Popen[bytes] | None = None
        self._slurmds: dict[int, subprocess.Popen[bytes]] = {}
        self._jobs: list[str] = []
        self._allocs: list[subprocess.Popen[str]] = []

    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm clients (and ddptui) to use this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ bring-up

    def _config(self) -> str:
        d = self.dir
        lines = [
            f"ClusterName={self.name}",
            f"SlurmctldHost={self.ctl_host}({self.tb.host_ip})",
            f"SlurmctldPort={self.port}",
            "SlurmdPort=6818",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool' / '%n'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={d / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "MpiDefault=none",
            "SchedulerType=sched/builtin",
            "ReturnToService=2",
            "InactiveLimit=0",
            "KillWait=2",
            "MessageTimeout=5",
            "SlurmdTimeout=30",
            "UnkillableStepTimeout=30",
        ]
        for i, name in enumerate(self.node_names):
            lines.append(
                f"NodeName={name} NodeAddr={self.tb.nodes[i].ip} CPUs={self.cpus} State=UNKNOWN"
            )
        lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 30) -> SlurmCluster:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        reason = slurm_unavailable()
        if reason:
            raise TestbedError(f"Slurm unavailable: {reason}")
        for sub in ("state", "spool"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.port = _free_port(self.tb.host_ip)
        self.conf.write_text(self._config())
        (self.dir / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        script = f"hostname {shlex.quote(self.ctl_host)} && exec {SLURMCTLD} -D -i -f " + (
            shlex.quote(str(self.conf))
        )
        with (self.dir / "slurmctld.out").open("wb") as log:
            self._ctld = subprocess.Popen(
                ["unshare", "--uts", "sh", "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=self.env,
            )
        for i in range(self.tb.n):
            self._start_slurmd(i)
        self.wait_nodes_idle(timeout)

    def _start_slurmd(self, i: int) -> None:
        name = self.node_names[i]
        (self.dir / "spool" / name).mkdir(parents=True, exist_ok=True)
        mounts = ["mountpoint -q /sys/fs/cgroup || mount -t tmpfs cgroup_root /sys/fs/cgroup"]
        for c in CGROUPS:
            mounts.append(
                f"mkdir -p /sys/fs/cgroup/{c} && (mountpoint -q /sys/fs/cgroup/{c} || "
                f"mount -t cgroup -o {c} cgroup /sys/fs/cgroup/{c})"
            )
        mounts.append(
            "mkdir -p /sys/fs/cgroup/systemd && (mountpoint -q /sys/fs/cgroup/systemd || "
            "mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd)"
        )
        self.tb.exec(i, ["sh", "-c", " && ".join(mounts)])
        argv = self.tb.nsenter_argv(i, [SLURMD, "-D", "-f", str(self.conf), "-N", name])
        with (self.dir / f"slurmd-{name}.out").open("wb") as log:
            self._slurmds[i] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=self.env,
            )

    def scontrol(self, *args: str, timeout: float = 20) -> str:
        return subprocess.run(
            ["scontrol", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout

    def node_states(self) -> dict[str, str]:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        ).stdout
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def wait_nodes_idle(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            if self._ctld is not None and self._ctld.poll() is not None:
                raise TestbedError(f"slurmctld exited: {self._logs()}")
            states = self.node_states()
            if len(states) == self.tb.n and all(s.startswith("idle") for s in states.values()):
                return
            time.sleep(0.2)
        raise TestbedError(f"Slurm nodes not idle after {timeout}s: {states}{self._logs()}")

    def _logs(self) -> str:
        out = ""
        for p in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out")):
            tail = p.read_text(errors="replace").splitlines()[-8:]
            out += f"\n--- {p.name}:\n" + "\n".join(tail)
        return out

    # ------------------------------------------------------------------ jobs

    def sbatch(self, script: str, *args: str, cwd: Path | None = None) -> str:
        path = self.dir / f"job-{len(self._jobs)}.sh"
        path.write_text(script)
        out = subprocess.run(
            ["sbatch", "--parsable", *args, str(path)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            cwd=cwd or self.dir,
        ).stdout.strip()
        job = out.split(";")[0]
        self._jobs.append(job)
        return job

    def allocate(self, nodes: int, *args: str) -> str:
        """A running job that holds `nodes` nodes (sleeps until cancelled)."""
        job = self.sbatch("#!/bin/sh\nexec sleep 100000\n", "-N", str(nodes), *args)
        self.wait_state(job, "RUNNING")
        return job

    def job_field(self, job: str, key: str) -> str:
        out = self.scontrol("show", "job", "-o", job)
        m = re.search(rf"\b{key}=(\S*)", out)
        return m.group(1) if m else ""

    def wait_state(self, job: str, state: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        seen = ""
        while time.monotonic() < deadline:
            seen = self.job_field(job, "JobState")
            if seen == state:
                return
            time.sleep(0.2)
        raise TestbedError(f"job {job} is {seen}, not {state}, after {timeout}s{self._logs()}")

    def cancel(self, job: str) -> None:
        subprocess.run(["scancel", job], env=self.env, timeout=20, check=False)

    def steps(self, job: str) -> list[str]:
        out = subprocess.run(
            ["squeue", "-h", "-s", "-j", job, "-o", "%i %j"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        ).stdout
        return [ln.strip() for ln in out.splitlines() if ln.strip()]

    def freeze(self, i: int, frozen: bool = True) -> None:
        """Stop (or continue) node i's slurmd: the node stops answering Slurm."""
        proc = self._slurmds[i]
        os.killpg(proc.pid, signal.SIGSTOP if frozen else signal.SIGCONT)

    # ------------------------------------------------------------------ teardown

    def stop(self) -> None:
        for i, proc in self._slurmds.items():  # a frozen slurmd would ignore SIGTERM
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.freeze(i, frozen=False)
        for job in self._jobs:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self.cancel(job)
        procs: list[Any] = [*self._slurmds.values()]
        if self._ctld is not None:
            procs.append(self._ctld)
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        left = [p.pid for p in procs if p.poll() is None]
        if left:
            kill_and_wait(left)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._slurmds.clear()
        self._ctld = None
