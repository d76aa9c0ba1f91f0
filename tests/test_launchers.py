"""Generated shell files, run as users run them.

Every launch.sh and job.sbatch of every reference spec and target parses (`bash -n`) and is
shellcheck clean. Each launcher's command (printed by its own BENCHC_DRY_RUN mode) is parsed
by the real torchrun and DeepSpeed argument parsers. The Slurm directives say what the plan
needs. The multi-node branch runs for real: two launchers on loopback as two nodes. And a
stop signal to launch.sh ends the command's whole process group.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from system_tools import Unavailable, ensure

from benchc.catalog.targets import TARGETS

from helpers import REPO, SPECS, point_in, run_cli

# every test here starts processes (bash, shellcheck, torchrun, benchc)
pytestmark = pytest.mark.integration

SPEC_FILES = sorted(p.name for p in SPECS.glob("*.bench"))


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> Path:
    """Every reference spec compiled for every target, and shrunk, with job files for cpu too."""
    out = tmp_path_factory.mktemp("builds")
    for spec in SPEC_FILES:
        for target in TARGETS:
            result = run_cli("compile", f"specs/{spec}", "-t", target, "--sbatch", "-o", str(out), cwd=REPO)
            assert result.code == 0, result.err
        assert run_cli("compile", f"specs/{spec}", "--smoke", "-o", str(out), cwd=REPO).code == 0
    # the training specs under runtime = accelerate too: accelerate launch (points *runtime-accelerate*)
    for spec in ("sd3.bench", "sd3-scale.bench", "beluga-train.bench"):
        for target in TARGETS:
            sets = ["--set", "runtime=accelerate", "--set", "train.precision=bf16", "--sbatch"]
            result = run_cli("compile", f"specs/{spec}", "-t", target, *sets, "-o", str(out), cwd=REPO)
            assert result.code == 0, result.err
    return out


def shell_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix in (".sh", ".sbatch"))


def test_every_shell_file_parses_and_is_shellcheck_clean(builds):
    try:
        ensure({"shellcheck": "shellcheck"})
    except Unavailable as exc:
        pytest.fail(f"shellcheck is required here: {exc}")
    files = shell_files(builds)
    points = {p.parent for p in files}
    assert len(points) >= len(SPEC_FILES) * len(TARGETS)  # every spec, target and sweep point
    assert {p.name for p in files} == {"launch.sh", "job.sbatch"}
    assert all((p / "launch.sh").exists() for p in points)
    assert all((p / "job.sbatch").exists() for p in points if not p.name.endswith("-smoke"))
    broken = [
        f"{f}: {proc.stderr}"
        for f in files
        if (proc := subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)).returncode
    ]
    assert not broken
    lint = subprocess.run(["shellcheck", "-S", "warning", *map(str, files)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout[-4000:]


def test_shellcheck_finds_what_it_is_asked_to_find(tmp_path):
    """The lint gate above can fail: the apostrophe that broke every multi-node launcher."""
    ensure({"shellcheck": "shellcheck"})
    bad = tmp_path / "bad.sh"
    bad.write_text('#!/usr/bin/env bash\n: "${NODE_RANK:?set it to this node\'s index}"\necho $1\n')
    assert subprocess.run(["bash", "-n", str(bad)], capture_output=True).returncode != 0
    assert subprocess.run(["shellcheck", "-S", "warning", str(bad)], capture_output=True).returncode != 0


@pytest.fixture(scope="module")
def slurm_conf(tmp_path_factory) -> Path:
    """The least configuration `scontrol show hostnames` reads (it expands host lists locally)."""
    try:
        ensure({"scontrol": "slurm-client"})
    except Unavailable as exc:
        pytest.fail(f"the Slurm client is required here: {exc}")
    path = tmp_path_factory.mktemp("slurm") / "slurm.conf"
    path.write_text("ClusterName=dry\nSlurmctldHost=localhost\n")
    return path


def dry_run(point: Path, **env: str) -> list[str]:
    """The command launch.sh would run, as argv."""
    full = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "RDZV_", "MACHINE_"))
    }
    full.update(PYTHON="python3", BENCHC_DRY_RUN="1", **env)
    proc = subprocess.run(["bash", str(point / "launch.sh"), "--metrics", "m.json"], capture_output=True,
                          text=True, env=full, cwd=point)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return shlex.split(proc.stdout)


def torchrun_args(argv: list[str]):
    from torch.distributed.run import get_args_parser

    assert argv[:3] == ["python3", "-m", "torch.distributed.run"], argv
    return get_args_parser().parse_args(argv[3:])


def deepspeed_args(argv: list[str]):
    from deepspeed.launcher.runner import parse_args

    assert argv[:3] == ["python3", "-m", "deepspeed.launcher.runner"], argv
    return parse_args(argv[3:])


def test_cpu_and_cuda_nodes_meet_at_a_c10d_rendezvous(builds, slurm_conf):
    s1 = builds / "sd3_mmdit_train/h100/batch-16"
    # outside Slurm: the user names the first node; no node rank is asked for
    args = torchrun_args(dry_run(s1, MASTER_ADDR="node0.example", MASTER_PORT="29555", RDZV_ID="r1"))
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("2", "8", "c10d")
    assert (args.rdzv_endpoint, args.rdzv_id) == ("node0.example:29555", "r1")
    assert args.training_script == "bench.py"
    assert args.training_script_args == ["--metrics", "m.json"]
    # under Slurm: the first node of the allocation, the job id
    args = torchrun_args(dry_run(s1, SLURM_CONF=str(slurm_conf), SLURM_JOB_NODELIST="gpu[07-08]",
                                 SLURM_JOB_NUM_NODES="2", SLURM_JOB_ID="4242"))  # fmt: skip
    assert (args.rdzv_endpoint, args.rdzv_id) == ("gpu07:29400", "4242")
    # an allocation of the wrong size is refused before anything starts
    proc = subprocess.run(["bash", str(s1 / "launch.sh")], capture_output=True, text=True,
                          env={**os.environ, "SLURM_CONF": str(slurm_conf), "SLURM_JOB_NODELIST": "g[1-3]",
                               "SLURM_JOB_NUM_NODES": "3", "BENCHC_DRY_RUN": "1"})  # fmt: skip
    assert proc.returncode == 2 and "has 3 nodes; this build needs 2" in proc.stderr
    # without either, the message says what to set
    bare = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "MASTER"))}
    proc = subprocess.run(["bash", str(s1 / "launch.sh")], capture_output=True, text=True, env=bare)
    assert proc.returncode != 0 and "set MASTER_ADDR to the address of the first node" in proc.stderr
    one_node = torchrun_args(dry_run(builds / "beluga_70b_infer/h100/default"))
    assert one_node.standalone and one_node.nproc_per_node == "8"


def test_one_device_runs_the_program_alone(builds):
    for target in ("gaudi2", "h100", "cpu"):
        point = builds / "sd3_large_infer" / target / "default"
        assert dry_run(point) == ["python3", "bench.py", "--metrics", "m.json"]
        assert "mpirun" not in (point / "launch.sh").read_text()


def fake_lscpu(folder: Path, sockets: int, cores_per_socket: int) -> Path:
    """lscpu's parsable output for a host with hyperthreads (two CPUs per core)."""
    rows = [
        f"{cpu},{core},{socket}"
        for socket in range(sockets)
        for core in range(cores_per_socket)
        for cpu in (2 * (socket * cores_per_socket + core), 2 * (socket * cores_per_socket + core) + 1)
    ]
    folder.mkdir(exist_ok=True)
    script = folder / "lscpu"
    script.write_text(
        "#!/usr/bin/env bash\n# fake lscpu -p=FIELDS for the launcher's core binding\n"
        'case "$1" in\n'
        f"  -p=Socket) printf '# Socket\\n'; printf '%s\\n' {' '.join(r.split(',')[2] for r in rows)} ;;\n"
        f"  -p=Core,Socket) printf '# Core,Socket\\n'; printf '%s\\n' "
        f"{' '.join(','.join(r.split(',')[1:]) for r in rows)} ;;\n"
        "esac\n"
    )  # fmt: skip
    script.chmod(0o755)
    return folder


def test_one_gaudi_node_binds_each_card_to_its_share_of_a_socket(builds, tmp_path):
    """gaudi_spawn's rule on a 2-socket host with 40 cores per socket: 8 cards -> 10 cores each
    (4 cards per socket); 2 cards -> a whole socket each, never more than a socket has."""
    path = f"{fake_lscpu(tmp_path / 'bin', 2, 40)}:{os.environ['PATH']}"
    point = builds / "beluga_70b_infer/gaudi2/default"  # 1 node x 8 cards, tensor parallel
    argv = dry_run(point, PATH=path)
    assert argv[:2] == ["mpirun", "-n"] and argv[2] == "8"
    assert argv[argv.index("--map-by") + 1] == "socket:PE=10"
    assert argv[-4:] == ["python3", "bench.py", "--metrics", "m.json"]
    text = (point / "launch.sh").read_text().replace("NPROC=8", "NPROC=2")
    two = tmp_path / "two"
    two.mkdir()
    (two / "launch.sh").write_text(text)
    argv = dry_run(two, PATH=path)
    assert argv[argv.index("--map-by") + 1] == "socket:PE=40"


def test_gaudi_deepspeed_and_multi_node_runs_use_deepspeeds_launcher(builds, slurm_conf, tmp_path):
    # ZeRO on one node: DeepSpeed's launcher, one rank per card, no --local_rank argument
    sets = ["parallel.sharding=zero3", "cluster.nodes=1", "parallel.data=8", "train.global_batch=32"]
    result = run_cli("compile", "specs/beluga-train.bench", "-t", "gaudi2", *(f"--set={s}" for s in sets),
                     "-o", str(tmp_path), cwd=REPO)  # fmt: skip
    assert result.code == 0, result.err
    args = deepspeed_args(dry_run(point_in(tmp_path / "beluga_70b_train/gaudi2")))
    assert (args.num_nodes, args.num_gpus, args.no_local_rank, args.user_script) == (1, 8, True, "bench.py")
    # 32 Gaudi nodes under Slurm: a hostfile written from the allocation, run on the first node
    point = builds / "sd3_mmdit_scale/gaudi2/nodes-32"
    argv = dry_run(point, SLURM_CONF=str(slurm_conf), SLURM_JOB_NODELIST="hls[001-032]", SLURM_JOB_ID="99")
    args = deepspeed_args(argv)
    hostfile = (point / args.hostfile).read_text().splitlines()
    assert hostfile == [f"hls{i:03d} slots=8" for i in range(1, 33)]
    assert (args.num_nodes, args.num_gpus, args.master_addr, args.launcher) == (32, 8, "hls001", "pdsh")
    assert args.no_local_rank and args.user_args == ["--metrics", "m.json"]
    job = (point / "job.sbatch").read_text()
    assert "\n  bash launch.sh" in job and "srun" not in job.split("set -euo pipefail")[1]
    # or a hostfile the user gives, which must list every node
    given = tmp_path / "hosts"
    given.write_text("a slots=8\nb slots=8\n")
    proc = subprocess.run(["bash", str(point / "launch.sh")], capture_output=True, text=True,
                          env={**os.environ, "HOSTFILE": str(given), "BENCHC_DRY_RUN": "1"})  # fmt: skip
    assert proc.returncode == 2 and "lists 2 hosts; this build needs 32" in proc.stderr


def directives(job: str) -> dict[str, str | None]:
    found = {}
    for line in job.splitlines():
        if line.startswith("#SBATCH --"):
            option, _, value = line[len("#SBATCH --") :].partition("=")
            found[option] = value or None
    return found


def test_slurm_jobs_ask_for_what_the_plan_needs(builds):
    h100 = directives((builds / "sd3_mmdit_train/h100/batch-16/job.sbatch").read_text())
    assert h100["nodes"] == "2" and h100["gpus-per-node"] == "8" and h100["ntasks-per-node"] == "1"
    assert "exclusive" in h100 and h100["output"] == "slurm-%j.out"
    assert h100["job-name"] == "benchc-sd3_mmdit_train-h100-batch-16"
    assert h100["time"] == "01:10:00"  # one trial's timeout (3600 s) + 10 minutes
    gaudi = directives((builds / "sd3_mmdit_scale/gaudi2/nodes-32/job.sbatch").read_text())
    assert gaudi["nodes"] == "32" and "gpus-per-node" not in gaudi and "gres" not in gaudi
    mpirun = directives((builds / "beluga_70b_infer/gaudi2/default/job.sbatch").read_text())
    assert mpirun["ntasks-per-node"] == "8"  # mpirun takes its slots from the allocation
    assert "srun" in (builds / "sd3_mmdit_train/cpu/batch-16-smoke/job.sbatch").read_text()


def test_the_slurm_block_reaches_the_job_and_submit_flags_are_sbatch_options(write, tmp_path):
    spec = write("s.bench", """
experiment slurmy {
  model mmdit { depth = 2 }
  train { batch = 4 }
  cluster { nodes = 2; devices_per_node = 8 }
  targets = [gaudi2, cpu]
  slurm { partition = "gaudi,gaudi-long"; account = "proj-1"; time = "1-00:00:00"
          gres = "hpu:8"; exclusive = false; job_name = "s1"; log = "logs/%x-%j.out" }
  on cpu { slurm.gres = "cpu:1" }
}
""")  # fmt: skip
    assert run_cli("compile", str(spec), "-o", str(tmp_path / "b")).code == 0
    gaudi = directives((tmp_path / "b/slurmy/gaudi2/default/job.sbatch").read_text())
    assert gaudi == {"job-name": "s1", "nodes": "2", "ntasks-per-node": "1", "gres": "hpu:8",
                     "time": "1-00:00:00", "partition": "gaudi,gaudi-long", "account": "proj-1",
                     "output": "logs/%x-%j.out"}  # fmt: skip
    cpu = directives((tmp_path / "b/slurmy/cpu/default/job.sbatch").read_text())
    assert cpu["gres"] == "cpu:1"


@pytest.mark.parametrize("setting, message", [
    ('slurm.partition="$(touch /tmp/pwned)"', "is not a valid slurm.partition"),
    ('slurm.account="a b"', "is not a valid slurm.account"),
    ('slurm.job_name="x;y"', "is not a valid slurm.job_name"),
    ('slurm.time="90 minutes"', "is not a valid slurm.time"),
    ('slurm.log="../outside.log"', "slurm.log must stay inside the build point"),
    ('slurm.log="/var/log/x"', "is not a valid slurm.log"),
    ("slurm.exclusive=1", "slurm.exclusive must be true or false"),
    ("slurm.nodes=2", "unknown key 'nodes' in slurm"),
])  # fmt: skip
def test_slurm_settings_are_checked_with_a_location(tmp_path, setting, message):
    result = run_cli("check", "specs/sd3.bench", "--set", setting, cwd=REPO)
    assert result.code == 2, result.out
    assert message in result.err and "--set[1]:1:" in result.err and "Traceback" not in result.err
    compiled = run_cli("compile", "specs/sd3.bench", "--set", setting, "-o", str(tmp_path), cwd=REPO)
    assert compiled.code == 2 and message in compiled.err
    assert not any(tmp_path.iterdir())


def test_no_launcher_demands_a_node_rank(builds):
    """torchrun's c10d rendezvous numbers the nodes. (accelerate launch wants a machine rank,
    its convention: launch.sh takes MACHINE_RANK, or SLURM_NODEID under Slurm; see
    tests/test_accelerate_runtime.py.)"""
    for path in shell_files(builds):
        text = path.read_text()
        assert "$NODE_RANK" not in text and "${NODE_RANK" not in text, path


# A program that starts a worker in its group which ignores SIGTERM (as a compile worker that
# does not hear it): only the end of the whole group ends it. `stubborn` ignores SIGTERM too.
GROUP_PROGRAM = """
import os, signal, subprocess, sys, time
if sys.argv[1] == "exit":
    sys.exit(3)
code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(99)"
worker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
worker.stdout.readline()
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", os.getpgrp(), flush=True)
try:
    time.sleep(600)
except KeyboardInterrupt:
    sys.exit(130)
"""


def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session `sid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[4]) == sid:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("mode, sig, code", [
    ("exit", None, 3),  # the command's status, whatever it is
    ("plain", signal.SIGTERM, 143),
    ("plain", signal.SIGINT, 130),  # the program hears Ctrl-C (KeyboardInterrupt), not ignored
    ("plain", signal.SIGHUP, 143),  # a closed terminal: passed on as SIGTERM
    ("stubborn", signal.SIGTERM, 137),  # killed after the grace (2 s here)
])  # fmt: skip
def test_a_stop_signal_to_the_launcher_ends_the_commands_whole_group(builds, tmp_path, mode, sig, code):
    text = (builds / "sd3_large_infer/cpu/default/launch.sh").read_text()  # one device: bench.py alone
    assert "STOP_GRACE_S=30\n" in text
    (tmp_path / "launch.sh").write_text(text.replace("STOP_GRACE_S=30\n", "STOP_GRACE_S=2\n"))
    (tmp_path / "bench.py").write_text(GROUP_PROGRAM)
    launcher = subprocess.Popen(["bash", str(tmp_path / "launch.sh"), mode], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                env={**os.environ, "PYTHON": sys.executable})  # fmt: skip
    try:
        if sig is not None:
            ready = launcher.stdout.readline().split()
            assert ready[0] == "ready" and int(ready[1]) != launcher.pid, ready  # a group of its own
            launcher.send_signal(sig)
        sent = time.monotonic()
        assert launcher.wait(timeout=30) == code, launcher.stdout.read()
        took = time.monotonic() - sent
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert took < (6 if mode == "stubborn" else 3), took
    if mode == "stubborn":
        assert took >= 2, took
    assert not session_members(launcher.pid)  # the program, its worker: nothing left
