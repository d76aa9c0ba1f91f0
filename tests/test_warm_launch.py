"""The test instrument tests/warm_launch.py reports what its ranks did as a launcher would: a
failing rank's status, its peers stopped, each rank's output and environment, start-up
instruments run before the program; so a test that runs a program from it cannot pass where
the same program launched for real would fail."""

from __future__ import annotations

import json
import os
import subprocess
import time

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
