"""The results store at 10,000 runs: writing them through the store API and `benchc ingest`
against raw sqlite3 doing the same, the damaged-store check at open, and reports over a store
of 10,000 runs against one of 100 that show the same rows.

    python benchmarks/store_speed.py [--runs N] [--rounds N]

Rows are S1 smoke runs as `benchc run` stores them: tests/scripted_points.ok_metrics()
(1.1 kB of JSON), the resolved plan of a real S1 build (3 kB), 10 points x 2 targets. Every
figure is a ratio of two measurements taken side by side in one round, the rounds alternating
which goes first; printed as the median over the rounds and its min-max.

  api / raw          Store.start + Store.finish per run, each its own transaction (what
                     `benchc run` does per trial), vs raw sqlite3 executemany of the same rows
                     in one transaction (same schema, same JSON text, fresh store each)
  api batch / raw    the same inside one Store.batch()
  ingest / raw read  `benchc ingest` of N metrics files (a new process: read, check against
                     the metrics schema, refuse duplicates, store in one transaction) vs a
                     new process that reads and json-parses the same files and inserts the
                     same rows raw, in one transaction. Goal: at most 1.5.
  report 10k / 100   the report of a store of N runs vs one of 100 runs, both showing the
                     same 20 rows of 5 trials (the N-run store holds N / 100 older series of
                     each row): in-process (open, read, sections, Markdown; the best of 3) through
                     Store.runs() + sections() (every run decoded: what `benchc report`
                     did before) and through Store.latest_runs() (what it does now); and
                     `benchc report` as a process, charts included. Goal: under 2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, spread  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
BENCHC = Path(sys.executable).parent / "benchc"

from scripted_points import ok_metrics  # noqa: E402

from benchc.report.collect import sections  # noqa: E402
from benchc.report.render import markdown  # noqa: E402
from benchc.results import ingest  # noqa: E402
from benchc.results.metrics import load_metrics  # noqa: E402
from benchc.results.store import Store  # noqa: E402
from benchc.results.untrusted_json import read_json_file  # noqa: E402

POINTS, TARGETS, TRIALS = 10, ("cpu", "h100"), 5

RAW_INGEST = """
import json, sqlite3, sys, uuid
from pathlib import Path
db, files = sys.argv[1], sys.argv[2:]
rows = []
for name in files:
    m = json.loads(Path(name).read_text())
    rows.append((uuid.uuid4().hex[:12], m["experiment"], m["target"], m["point"],
                 json.dumps(m["point_values"]), int(m["smoke"]), m["spec_sha256"], "ok",
                 json.dumps(m), json.dumps({"host": m["host"]}), uuid.uuid4().hex[:12], 1,
                 "ingest", m["started_at"], m["ended_at"]))
connection = sqlite3.connect(db, isolation_level=None)
connection.execute("BEGIN")
connection.executemany(
    "INSERT INTO runs (id, experiment, target, point, point_values, smoke, spec_sha256, status,"
    " metrics, environment, series, trial, source, started_at, ended_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
connection.execute("COMMIT")
"""


def real_plan(work: Path) -> dict:
    out = work / "plan-build"
    subprocess.run([str(BENCHC), "compile", str(REPO / "specs" / "sd3.bench"), "--target", "cpu", "--smoke",
                    "-o", str(out)], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    manifest = sorted(out.glob("*/cpu/*/manifest.json"))[0]
    return json.loads(manifest.read_text())["plan"]


def runs(n: int, plan: dict) -> list[dict]:
    """n runs: series of TRIALS trials, cycling over every (point, target), oldest first."""
    made = []
    for i in range(n):
        series, trial = divmod(i, TRIALS)
        key = series % (POINTS * len(TARGETS))
        point, target = f"p{key // len(TARGETS)}", TARGETS[key % len(TARGETS)]
        metrics = ok_metrics(100.0 + key + trial / 10, target=target, point=point)
        metrics["point_values"] = {"train.batch": key // len(TARGETS)}
        stamp = (
            f"2026-01-01T{i // 360000 % 24:02d}:{i // 6000 % 60:02d}:{i // 100 % 60:02d}.{i % 100:02d}0+00:00"
        )
        metrics["started_at"] = metrics["ended_at"] = stamp
        made.append({"metrics": metrics, "plan": plan, "series": f"s{series:06d}", "trial": trial + 1})
    return made


def start_args(run: dict) -> dict:
    m = run["metrics"]
    return dict(
        experiment=m["experiment"], target=m["target"], point=m["point"], point_values=m["point_values"],
        smoke=m["smoke"], spec_path="specs/sd3.bench", spec_sha256=m["spec_sha256"], build_path="build/x",
        log_path="runs/x/log.txt", environment={"host": m["host"], "platform": "Linux", "benchc": "0.1.0"},
        plan=run["plan"], series=run["series"], trial=run["trial"], started_at=m["started_at"],
    )  # fmt: skip


def through_api(path: Path, made: list[dict], batch: bool) -> float:
    Store(path).close()  # the schema, outside the timing
    begin = time.perf_counter()
    with Store(path) as store:
        if batch:
            with store.batch():
                for run in made:
                    run_id = store.start(**start_args(run))
                    store.finish(run_id, "ok", None, run["metrics"], ended_at=run["metrics"]["ended_at"])
        else:
            for run in made:
                run_id = store.start(**start_args(run))
                store.finish(run_id, "ok", None, run["metrics"], ended_at=run["metrics"]["ended_at"])
    return time.perf_counter() - begin


def raw(path: Path, made: list[dict]) -> float:
    import os
    import socket
    import sqlite3
    import uuid

    Store(path).close()
    begin = time.perf_counter()
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("BEGIN")
    rows = []
    for run in made:
        a, m = start_args(run), run["metrics"]
        rows.append((uuid.uuid4().hex[:12], a["experiment"], a["target"], a["point"],
                     json.dumps(a["point_values"]), int(a["smoke"]), a["spec_path"], a["spec_sha256"],
                     a["build_path"], a["log_path"], "ok", json.dumps(m), json.dumps(a["environment"]),
                     json.dumps(a["plan"]), a["series"], a["trial"], "run", os.getpid(),
                     socket.gethostname(), a["started_at"], m["ended_at"]))  # fmt: skip
    connection.executemany(
        "INSERT INTO runs (id, experiment, target, point, point_values, smoke, spec_path, spec_sha256,"
        " build_path, log_path, status, metrics, environment, plan, series, trial, source, runner_pid,"
        " runner_host, started_at, ended_at) VALUES (" + ", ".join("?" * 21) + ")",
        rows,
    )
    connection.execute("COMMIT")
    connection.close()
    return time.perf_counter() - begin


def write_files(folder: Path, made: list[dict]) -> list[str]:
    folder.mkdir()
    names = []
    for i, run in enumerate(made):
        path = folder / f"m{i:05d}.json"
        path.write_text(json.dumps(run["metrics"], indent=2))
        names.append(str(path))
    return names


def timed_process(command: list[str]) -> float:
    begin = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - begin


def ingest_pair(work: Path, files: list[str], first: str) -> tuple[float, float]:
    db_a, db_b = work / "ingest.db", work / "raw-ingest.db"
    for db in (db_a, db_b):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        Store(db).close()
    script = work / "raw_ingest.py"
    script.write_text(RAW_INGEST)
    jobs = {
        "ingest": [str(BENCHC), "ingest", *files, "--db", str(db_a)],
        "raw": [sys.executable, str(script), str(db_b), *files],
    }
    order = ["ingest", "raw"] if first == "ingest" else ["raw", "ingest"]
    seconds = {name: timed_process(jobs[name]) for name in order}
    return seconds["ingest"], seconds["raw"]


def ingest_phases(files: list[str]) -> dict[str, float]:
    """Where `benchc ingest` spends its time, in-process, per phase (one pass)."""
    paths = [Path(f) for f in files]
    phases = {}
    begin = time.perf_counter()
    for path in paths:
        read_json_file(path, "metrics file")
    phases["read + bounds checks"] = time.perf_counter() - begin
    begin = time.perf_counter()
    loaded = [load_metrics(path) for path in paths]
    phases["load_metrics (read + schema)"] = time.perf_counter() - begin
    begin = time.perf_counter()
    digests = [ingest.metrics_sha256(m) for m in loaded]
    phases["sha256"] = time.perf_counter() - begin
    with tempfile.TemporaryDirectory() as name:
        with Store(Path(name) / "r.db") as store:
            begin = time.perf_counter()
            for digest in digests:
                store.stored_metrics(digest)
            phases["duplicate lookups"] = time.perf_counter() - begin
            begin = time.perf_counter()
            with store.batch():
                for path, m, digest in zip(paths, loaded, digests):
                    ingest.store_metrics(store, path, m, digest)
            phases["store_metrics (manifest lookup + start + finish)"] = time.perf_counter() - begin
    return phases


def fill(path: Path, made: list[dict]) -> None:
    with Store(path) as store, store.batch():
        for run in made:
            run_id = store.start(**start_args(run))
            store.finish(run_id, "ok", None, run["metrics"], ended_at=run["metrics"]["ended_at"])


def report_in_process(path: Path, latest: bool, repeat: int = 3) -> tuple[float, str]:
    """Open, read, sections, Markdown: the best of `repeat` (the least disturbed by other work)."""
    best = float("inf")
    for _ in range(repeat):
        begin = time.perf_counter()
        with Store(path) as store:
            records = store.latest_runs() if latest else store.runs()
        page = markdown(sections(records), {})
        best = min(best, time.perf_counter() - begin)
    return best, page


def open_costs(path: Path, repeat: int = 5) -> dict[str, float]:
    import sqlite3

    opens, checks = [], []
    for _ in range(repeat):
        begin = time.perf_counter()
        Store(path).close()
        opens.append(time.perf_counter() - begin)
        connection = sqlite3.connect(path)
        begin = time.perf_counter()
        connection.execute("PRAGMA quick_check(1)").fetchone()
        checks.append(time.perf_counter() - begin)
        connection.close()
    return {"open": sorted(opens)[repeat // 2], "quick_check": sorted(checks)[repeat // 2],
            "bytes": path.stat().st_size}  # fmt: skip


def line(label: str, ratios: list[float], detail: str = "") -> None:
    median, _, low, high = spread(ratios)
    print(f"{label:42} {median:8.3f}   min-max {low:.3f}-{high:.3f}   {detail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(header("results store"))
    with tempfile.TemporaryDirectory(prefix="benchc-store-") as name:
        work = Path(name)
        plan = real_plan(work)
        made = runs(args.runs, plan)
        small = runs(100, plan)
        files = write_files(work / "metrics", made)
        api, batch, ing = [], [], []
        seconds: dict[str, list[float]] = {"api": [], "batch": [], "raw": [], "ingest": [], "raw-ingest": []}
        for i in range(args.rounds):
            for db in work.glob("w*.db*"):
                db.unlink()
            if i % 2 == 0:
                r = raw(work / "w-raw.db", made)
                a = through_api(work / "w-api.db", made, batch=False)
                b = through_api(work / "w-batch.db", made, batch=True)
            else:
                b = through_api(work / "w-batch.db", made, batch=True)
                a = through_api(work / "w-api.db", made, batch=False)
                r = raw(work / "w-raw.db", made)
            i_s, ri_s = ingest_pair(work, files, "ingest" if i % 2 else "raw")
            api.append(a / r)
            batch.append(b / r)
            ing.append(i_s / ri_s)
            for key, value in (("api", a), ("batch", b), ("raw", r), ("ingest", i_s), ("raw-ingest", ri_s)):
                seconds[key].append(value)
        med = {k: sorted(v)[len(v) // 2] for k, v in seconds.items()}
        print(
            f"{args.runs:,} runs, {args.rounds} interleaved rounds; ratio median, min-max, seconds (median)"
        )
        line("api (a transaction each) / raw", api, f"{med['api']:.2f} s vs {med['raw']:.2f} s")
        line("api in one batch / raw", batch, f"{med['batch']:.2f} s vs {med['raw']:.2f} s")
        line("benchc ingest / raw read+insert", ing,
             f"{med['ingest']:.2f} s vs {med['raw-ingest']:.2f} s (goal <= 1.5)")  # fmt: skip
        print("where `benchc ingest` spends its time (in-process, one pass):")
        for phase, value in ingest_phases(files).items():
            print(f"  {phase:48} {value:6.2f} s")

        big, little = work / "report-10k.db", work / "report-100.db"
        fill(big, made)
        fill(little, small)
        costs_big, costs_little = open_costs(big), open_costs(little)
        big_mib, little_mib = costs_big["bytes"] / 2**20, costs_little["bytes"] / 2**20
        print(
            f"PRAGMA quick_check of a store of {args.runs:,} runs ({big_mib:.1f} MiB): "
            f"{costs_big['quick_check'] * 1e3:.1f} ms; of 100 runs ({little_mib:.2f} MiB): "
            f"{costs_little['quick_check'] * 1e3:.1f} ms. Opening either for reading (no check: "
            f"it runs before a connection's first write): "
            f"{costs_big['open'] * 1e3:.1f} / {costs_little['open'] * 1e3:.1f} ms"
        )
        ratios: dict[str, list[float]] = {"runs": [], "latest": [], "process": []}
        times: dict[str, list[float]] = {}
        for i in range(max(args.rounds, 5)):
            got = {}
            for path, size in [(big, "big"), (little, "little")][:: 1 if i % 2 == 0 else -1]:
                got[f"runs-{size}"], page_all = report_in_process(path, latest=False, repeat=1)
                got[f"latest-{size}"], page_latest = report_in_process(path, latest=True)
                assert page_all == page_latest, "latest_runs() must give the report runs() gives"
                got[f"process-{size}"] = timed_process(
                    [str(BENCHC), "report", "--db", str(path), "-o", str(work / f"out-{size}")]
                )
            for kind in ratios:
                ratios[kind].append(got[f"{kind}-big"] / got[f"{kind}-little"])
            for key, value in got.items():
                times.setdefault(key, []).append(value * 1e3)
        ms = {key: sorted(values)[len(values) // 2] for key, values in times.items()}
        pages = [(work / f"out-{size}" / "report.md").read_text() for size in ("big", "little")]
        label = f"report {args.runs // 1000}k / 100"
        vs = "{:.0f} ms vs {:.0f} ms".format
        line(
            f"{label}, Store.runs()", ratios["runs"], vs(ms["runs-big"], ms["runs-little"]) + " (in-process)"
        )
        line(
            f"{label}, Store.latest_runs()",
            ratios["latest"],
            vs(ms["latest-big"], ms["latest-little"]) + " (in-process; goal < 2)",
        )
        line(
            f"{label}, benchc report",
            ratios["process"],
            vs(ms["process-big"], ms["process-little"])
            + f" (a new process, charts; same page: {pages[0] == pages[1]})",
        )


if __name__ == "__main__":
    main()
