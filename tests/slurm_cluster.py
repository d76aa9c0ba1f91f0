"""A real two-node Slurm cluster on this machine, for the tests of `benchc submit`.

Each node is a network namespace with its own address on a bridge; they share the
filesystem, so the venv and the build folders are visible on both, as on a cluster with a
shared home. munge and slurmctld run in the root namespace, one slurmd in each node's
namespace (facts and pitfalls: shared/reference/platforms.md). Everything the cluster makes
is undone by `down()`, also after a failed test, and `up()` first clears what an earlier,
killed run may have left, so it works when run twice.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from system_tools import Unavailable, ensure

from benchc.pids import alive

ROOT = Path("/tmp/benchc-test-slurm")  # fixed, so a later run finds what a killed one left
BRIDGE, SUBNET = "br-bcnt", "10.79.0"  # a private test range no other test uses
NODES = ("bcn1", "bcn2")
HOSTS_MARK = "# benchc test cluster"
CTLD_PORT, SLURMD_PORT = 6917, 6918  # not Slurm's defaults: a real cluster here is not touched
PACKAGES = {"slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client", "munged": "munge"}


def _run(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def _stop(pid_file: Path) -> None:
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.1)
        if not alive(pid):
            return


class TwoNodeSlurm:
    def __init__(self) -> None:
        self.conf = ROOT / "slurm.conf"
        self.started_munge = False

    @property
    def env(self) -> dict[str, str]:
        """What the cluster's commands need, and the real interpreter for the programs of its
        jobs (sbatch exports it): each node is a host of its own (its name, its network), which a
        program forked from the tests' warm process (tests/conftest.py) would not be on."""
        return {"SLURM_CONF": str(self.conf), "PYTHON": sys.executable}

    # -- up

    def up(self) -> None:
        ensure(PACKAGES)
        self.down()  # whatever an earlier, killed run left behind
        for folder in ("state", "log", *(f"spool-{n}" for n in NODES)):
            (ROOT / folder).mkdir(parents=True, exist_ok=True)
        try:
            self._network()
        except RuntimeError as exc:
            self.down()
            raise Unavailable(f"cannot make network namespaces here: {exc}") from exc
        self._munge()
        self._write_conf()
        env = {**os.environ, **self.env}
        _run("slurmctld", "-f", str(self.conf), env=env)
        for node in NODES:
            _run("nsenter", f"--net=/run/netns/{node}", "unshare", "--uts", "sh", "-c",
                 f'hostname {node}; exec slurmd -f "$SLURM_CONF" -N {node}', env=env)  # fmt: skip
        self._wait_idle()

    def _network(self) -> None:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        for index, node in enumerate(NODES, 1):
            veth = f"vbcnt{index}"
            _run("ip", "netns", "add", node)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", node)
            _run("ip", "link", "set", veth, "master", BRIDGE)
            _run("ip", "link", "set", veth, "up")
            inside = ("nsenter", f"--net=/run/netns/{node}", "ip")
            _run(*inside, "addr", "add", f"{SUBNET}.1{index}/24", "dev", "eth0")
            _run(*inside, "link", "set", "eth0", "up")
            _run(*inside, "link", "set", "lo", "up")
        lines = [f"{SUBNET}.1{i} {node}  {HOSTS_MARK}" for i, node in enumerate(NODES, 1)]
        with open("/etc/hosts", "a") as hosts:
            hosts.write("\n".join(lines) + "\n")

    def _munge(self) -> None:
        if _run("sh", "-c", "munge -n | unmunge", check=False).returncode == 0:
            return  # a munged is already serving this machine
        for folder in ("/run/munge", "/var/lib/munge", "/var/log/munge"):
            Path(folder).mkdir(parents=True, exist_ok=True)
            shutil.chown(folder, "munge", "munge")
        for stale in Path("/run/munge").glob("munge.socket.2*"):
            stale.unlink()
        _run("runuser", "-u", "munge", "--", "/usr/sbin/munged")
        self.started_munge = True
        deadline = time.monotonic() + 10
        while _run("sh", "-c", "munge -n | unmunge", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("munged did not come up")
            time.sleep(0.1)

    def _write_conf(self) -> None:
        nodes = "\n".join(f"NodeName={n} NodeAddr={SUBNET}.1{i} CPUs=1 RealMemory=2000"
                          for i, n in enumerate(NODES, 1))  # fmt: skip
        self.conf.write_text(f"""\
ClusterName=benchc-test
SlurmctldHost={socket.gethostname()}({SUBNET}.1)
SlurmctldPort={CTLD_PORT}
SlurmdPort={SLURMD_PORT}
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
DebugFlags=NO_CONF_HASH
KillWait=5
StateSaveLocation={ROOT}/state
SlurmctldPidFile={ROOT}/slurmctld.pid
SlurmctldLogFile={ROOT}/log/slurmctld.log
SlurmdSpoolDir={ROOT}/spool-%n
SlurmdPidFile={ROOT}/slurmd-%n.pid
SlurmdLogFile={ROOT}/log/slurmd-%n.log
{nodes}
PartitionName=test Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
""")

    def _wait_idle(self, seconds: float = 60.0) -> None:
        env = {**os.environ, **self.env}
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            proc = _run("sinfo", "-h", "-N", "-o", "%N %t", check=False, env=env)
            states = dict(line.split() for line in proc.stdout.splitlines() if len(line.split()) == 2)
            if all(states.get(n) == "idle" for n in NODES):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the nodes did not become idle: {proc.stdout or proc.stderr}")

    def log(self, name: str) -> str:
        path = ROOT / "log" / name
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    # -- down

    def _stop_strays(self) -> None:
        """Processes the daemons left (a job step's slurmstepd, a task): all of them carry this
        cluster's SLURM_CONF in their environment, which no other process here does."""
        marker = f"SLURM_CONF={self.conf}".encode()
        for _ in range(2):
            strays = []
            for proc in Path("/proc").iterdir():
                if proc.name.isdigit() and int(proc.name) != os.getpid():
                    try:
                        if marker in (proc / "environ").read_bytes().split(b"\0"):
                            strays.append(int(proc.name))
                    except OSError:
                        continue
            for pid in strays:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(alive(pid) for pid in strays):
                time.sleep(0.1)

    def down(self) -> None:
        if self.conf.exists() and (ROOT / "slurmctld.pid").exists():
            env = {**os.environ, **self.env}
            _run("scancel", "--user", "root", check=False, env=env)
            deadline = time.monotonic() + 15  # let the jobs' processes end before their daemons
            while time.monotonic() < deadline:
                queue = _run("squeue", "-h", "-o", "%i", check=False, env=env)
                if queue.returncode != 0 or not queue.stdout.strip():
                    break
                time.sleep(0.2)
        for pid_file in (*(ROOT / f"slurmd-{n}.pid" for n in NODES), ROOT / "slurmctld.pid"):
            _stop(pid_file)
        self._stop_strays()
        if self.started_munge:
            _stop(Path("/run/munge/munged.pid"))
            self.started_munge = False
        for node in NODES:
            _run("ip", "netns", "del", node, check=False)
        _run("ip", "link", "del", BRIDGE, check=False)
        try:
            text = Path("/etc/hosts").read_text()
            kept = [line for line in text.splitlines() if not line.endswith(HOSTS_MARK)]
            if len(kept) != len(text.splitlines()):
                Path("/etc/hosts").write_text("\n".join(kept) + "\n")
        except OSError:
            pass
        netns = Path("/run/netns")
        if netns.is_dir() and not any(netns.iterdir()) and os.path.ismount(netns):
            _run("umount", str(netns), check=False)
        shutil.rmtree(ROOT, ignore_errors=True)
