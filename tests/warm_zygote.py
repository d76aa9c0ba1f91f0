"""A test instrument, not part of benchc: the process tests/warm_launch.py forks ranks from.

It reads one request a line on stdin (a script to run as __main__, such as a build's bench.py,
its arguments, working directory and environment, its ranks), imports the libraries the
request's programs import at their top (once: they stay imported for every later request),
forks one child a rank and answers on stdout with the ranks' exit codes and outputs. Each child
is a process of its own: a session of its own, its output in files, the request's environment
and torchrun's variables for its rank, the request's working directory, the start-up
instruments of its PYTHONPATH run as Python runs sitecustomize, then the script as __main__, and
the interpreter's exit functions. Nothing here runs an operator before a fork,
so no thread pool is inherited. It ends when its stdin closes.
"""

from __future__ import annotations

import ast
import atexit
import json
import os
import runpy
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ARMED = {p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}  # ran at this start-up
GRACE_S = 10  # after a rank fails, the others' time to end before SIGTERM (torchrun stops them too)


def preload(program: Path) -> None:
    """Import what the program imports at its top, here, so that its ranks find it imported."""
    tree = ast.parse(program.read_text())
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    for node in imports:
        try:
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(program), "exec"), {})
        except Exception:  # noqa: BLE001 - the rank meets the same error and reports it
            pass


def rank_environment(request: dict, rank: int) -> dict:
    """The request's environment with what torchrun gives a rank (none for a one-process
    build, whose launch.sh runs the program alone)."""
    env = dict(request["env"])
    world, nodes = request["processes"], request["nodes"]
    if request["launcher"] == "torchrun":
        per_node = world // nodes
        env.update(RANK=str(rank), LOCAL_RANK=str(rank % per_node), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(per_node), GROUP_RANK=str(rank // per_node),
                   GROUP_WORLD_SIZE=str(nodes), ROLE_RANK=str(rank), ROLE_WORLD_SIZE=str(world),
                   ROLE_NAME="default", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(request["port"]),
                   TORCHELASTIC_RUN_ID=request["run_id"], TORCHELASTIC_RESTART_COUNT="0",
                   TORCHELASTIC_MAX_RESTARTS="0")  # fmt: skip
    return env


def run_rank(program: Path, args: list[str], cwd: str, env: dict, out: Path) -> None:
    """In the forked child: become the rank, run the program, exit with its status."""
    os.setsid()
    for fd, name in ((1, "out"), (2, "err")):
        os.dup2(os.open(out.with_suffix(f".{name}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(cwd)
    sys.argv = [str(program), *args]
    sys.path[0] = str(program.parent)
    become_main(env, None, str(program))


def become_main(env: dict, module: str | None, script: str) -> None:
    """In a forked child whose streams, signals, argv and sys.path[0] are set: the environment,
    the start-up instruments of its PYTHONPATH, the module or script as __main__, then what the
    interpreter does at its end (threads joined, exit functions); exits with the status."""
    os.environ.clear()
    os.environ.update(env)
    code = 0
    try:
        for entry in [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in ARMED]:
            sys.path.insert(1, entry)
            if (Path(entry) / "sitecustomize.py").exists():
                runpy.run_path(str(Path(entry) / "sitecustomize.py"), run_name="sitecustomize")
        if env.get("OMP_NUM_THREADS"):
            import torch

            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        if module is None:
            runpy.run_path(script, run_name="__main__")
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as end:
        if end.code is None or isinstance(end.code, int):
            code = end.code or 0
        else:
            print(end.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:  # as the interpreter: the traceback, then killed by SIGINT
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 - as the interpreter does: the traceback, status 1
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # non-daemon threads, as the interpreter waits for them
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)


def serve(request: dict) -> dict:
    program = Path(request["script"])
    for path in request["preload"]:
        preload(Path(path))
    folder = Path(tempfile.mkdtemp(prefix="warm-"))
    sys.stdout.flush()
    sys.stderr.flush()
    children = {}
    for rank in range(request["processes"]):
        pid = os.fork()
        if pid == 0:
            env = rank_environment(request, rank)
            run_rank(program, request["args"], request["cwd"], env, folder / str(rank))
        children[pid] = rank
    codes: dict[int, int] = {}
    deadline = time.monotonic() + request["timeout"]
    failed_at, first_failed, termed = None, None, False
    while len(codes) < len(children):
        for pid, rank in children.items():
            if rank in codes:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes[rank] = os.waitstatus_to_exitcode(status)
                if codes[rank] != 0 and failed_at is None:
                    failed_at, first_failed = time.monotonic(), rank
        now = time.monotonic()
        stop = None
        if now > deadline or (failed_at is not None and now > failed_at + 2 * GRACE_S):
            stop = signal.SIGKILL
        elif failed_at is not None and now > failed_at + GRACE_S and not termed:
            stop, termed = signal.SIGTERM, True
        for pid, rank in children.items():
            if stop is not None and rank not in codes:
                try:
                    os.killpg(pid, stop)
                except ProcessLookupError:
                    pass
        time.sleep(0.05)
    for pid in children:  # what a rank left running in its session (compile workers)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    outputs = {name: "".join((folder / f"{rank}.{name}").read_text(errors="replace")
                             for rank in range(request["processes"])) for name in ("out", "err")}  # fmt: skip
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    return {"codes": [codes[rank] for rank in range(request["processes"])], "first_failed": first_failed,
            "timed_out": time.monotonic() > deadline, **outputs}  # fmt: skip


def main() -> None:
    import torch  # noqa: F401 - every program's first import; a request adds the rest

    replies = os.fdopen(os.dup(1), "w")  # the answers' own channel: what libraries print goes to stderr
    os.dup2(2, 1)
    for line in sys.stdin:
        reply = serve(json.loads(line))
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
