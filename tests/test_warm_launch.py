"""The test instruments tests/warm_launch.py and tests/warm_python/python report what their
programs did as a launcher or an interpreter would: a failing rank's status, its peers stopped,
each rank's output and environment, start-up instruments run before the program, an exit status
or a killing signal, signals passed on, nothing left running when the caller is killed; so a
test that runs a program from them cannot pass where the same program run for real would fail."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from warm_launch import warm_run

pytestmark = pytest.mark.integration

RANKS = """
import json, os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} of {os.environ['WORLD_SIZE']} in {os.getcwd()}")
with open(f"{sys.argv[1]}.{rank}.json", "w") as out:
    json.dump({k: os.environ.get(k) for k in ("LOCAL_RANK", "MASTER_ADDR", "GIVEN", "OMP_NUM_THREADS")}, out)
if rank == 1:
    sys.exit(int(sys.argv[2]))
time.sleep(float(sys.argv[3]))  # a peer left waiting, as in a collective
"""


def test_a_failing_rank_gives_its_status_and_its_waiting_peer_is_stopped(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    env = {**os.environ, "GIVEN": "yes", "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    done = warm_run(script, [tmp_path / "env", 3, 600], env, tmp_path, [], processes=2)
    assert done.returncode == 3 and time.monotonic() - started < 120
    assert f"rank 0 of 2 in {tmp_path}" in done.stdout and f"rank 1 of 2 in {tmp_path}" in done.stdout
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"env.{rank}.json").read_text())
        expected = {"LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "GIVEN": "yes",
                    "OMP_NUM_THREADS": "1"}  # fmt: skip
        assert seen == expected
    ok = warm_run(script, [tmp_path / "again", 0, 0], env, tmp_path, [], processes=2)
    assert ok.returncode == 0
    with pytest.raises(subprocess.TimeoutExpired):  # rank 0 sleeps past the run's limit
        warm_run(script, [tmp_path / "late", 0, 600], env, tmp_path, [], timeout=2, processes=2)


def test_an_exception_is_status_1_with_its_traceback_and_a_start_up_instrument_runs_first(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("import os\nos.environ['INSTRUMENT'] = 'ran'\n")
    script = tmp_path / "fails.py"
    script.write_text("import os\nprint(os.environ['INSTRUMENT'])\nraise ValueError('the program failed')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    done = warm_run(script, [], env, tmp_path, [])
    assert done.returncode == 1 and done.stdout == "ran\n"
    assert "ValueError: the program failed" in done.stderr and "Traceback" in done.stderr


# ---- tests/warm_python/python: the interpreter of the programs launch.sh runs in the tests


def warm_python(*args, cwd: Path, env: dict | None = None, **options) -> subprocess.Popen:
    """`$PYTHON ARGS` as launch.sh runs it, PYTHON being the tests' (the warm one)."""
    assert os.environ["PYTHON"].endswith("warm_python/python")
    env = {**os.environ, **(env or {})}
    return subprocess.Popen([os.environ["PYTHON"], *map(str, args)], cwd=cwd, env=env, text=True, **options)


SERVED = """
import os, signal, sys, time
import torch
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print("served", os.getpid(), sys.argv[1:], os.getcwd(), os.environ.get("GIVEN"), flush=True)
print("to stderr", file=sys.stderr, flush=True)
if sys.argv[1] in ("stubborn", "plain"):
    time.sleep(600)
sys.exit(int(sys.argv[1]))
"""


def served_pid(process: subprocess.Popen) -> int:
    words = process.stdout.readline().split()
    assert words[0] == "served", words
    return int(words[1])


def gone(pid: int, within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_the_warm_python_gives_the_status_streams_directory_and_environment(tmp_path):
    (tmp_path / "served.py").write_text(SERVED)
    process = warm_python("-u", "served.py", 3, cwd=tmp_path, env={"GIVEN": "yes"},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    out, err = process.communicate(timeout=120)
    assert process.returncode == 3 and err == "to stderr\n"
    words = out.split()
    assert words[0] == "served" and int(words[1]) != process.pid  # forked from the warm process
    assert out.split(" ", 2)[2] == f"['3'] {tmp_path} yes\n"
    fallback = warm_python("-c", "import sys; print(sys.executable)", cwd=tmp_path, stdout=subprocess.PIPE)
    assert (
        fallback.communicate(timeout=60)[0].strip() == sys.executable
    )  # what it does not serve: the real one


@pytest.mark.parametrize("mode, sig, status", [
    ("plain", signal.SIGTERM, -signal.SIGTERM),  # killed by the signal, as the program was
    ("plain", signal.SIGINT, -signal.SIGINT),  # KeyboardInterrupt, then killed by SIGINT as Python does
    ("stubborn", signal.SIGTERM, 7),  # the program's own handler decides
    ("plain", signal.SIGKILL, -signal.SIGKILL),  # the caller killed: the program goes too
])  # fmt: skip
def test_the_warm_python_passes_signals_on_and_ends_as_its_program_ends(tmp_path, mode, sig, status):
    (tmp_path / "served.py").write_text(SERVED)
    process = warm_python("served.py", mode, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    pid = served_pid(process)
    process.send_signal(sig)
    assert process.wait(timeout=60) == status
    assert gone(pid)


def test_torchrun_under_the_warm_python_starts_its_ranks_from_it(tmp_path):
    """torchrun starts its ranks with sys.executable: the warm python again; they meet over gloo."""
    (tmp_path / "ranks.py").write_text(
        "import os, sys, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "total = torch.ones(1)\n"
        "dist.all_reduce(total)\n"
        "warm = sys.executable.endswith('warm_python/python')\n"
        # one write per rank: with PYTHONUNBUFFERED, print's pieces of two ranks would interleave
        "sys.stdout.write(f\"rank {os.environ['RANK']} {int(total.item())} {warm}\\n\")\n"
        "dist.destroy_process_group()\n"
        "sys.exit(int(sys.argv[1]) if os.environ['RANK'] == '1' else 0)\n"
    )
    for code in (0, 5):
        torchrun = ("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", 2)
        process = warm_python(*torchrun, "ranks.py", code, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)  # fmt: skip
        out, err = process.communicate(timeout=180)
        assert sorted(out.splitlines()) == ["rank 0 2 True", "rank 1 2 True"], err[-2000:]
        assert process.returncode == (1 if code else 0), err[-2000:]  # torchrun's status for a failed rank
