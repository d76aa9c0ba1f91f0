# ==== benchc: device-neutral core (no target code; unused blocks left out) ====
def build_model(model_plan: dict):
    """transformers' causal LM of the plan's model_type: local weights if named, else its
    config."""
    if model_plan["weights"]:
        return AutoModelForCausalLM.from_pretrained(
            model_plan["weights"], local_files_only=True
        )
    config = AutoConfig.for_model(model_plan["model_type"], **model_plan["config"])
    return AutoModelForCausalLM.from_config(config=config)


def initialize_weights(model) -> None:
    """Parameters materialised from the meta device, initialised as transformers' causal LMs
    are (matrices normal with the config's initializer_range, biases 0, norm weights 1),
    whatever layer holds them: DeepSpeed's tensor-parallel layers are no nn.Linear."""
    std = model.config.initializer_range
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() >= 2:
                parameter.normal_(mean=0.0, std=std)
            elif name.endswith("bias"):
                parameter.zero_()
            else:
                parameter.fill_(1.0)


def repeated_blocks(model):
    """The list of repeated blocks (decoder layers)."""
    return model.model.layers


def block_lists(model) -> list:
    """The lists of repeated blocks, compiled block by block (one list: the decoder layers)."""
    return [repeated_blocks(model)]


def transformer_blocks(model) -> list:
    """The decoder layers: FSDP2 shards each of them."""
    return list(repeated_blocks(model))


def enable_activation_checkpointing(model) -> None:
    model.gradient_checkpointing_enable()


def synthetic_batch(train: dict, model_plan: dict, device) -> dict:
    """One batch of random token ids, before timing: from a generator of its own, so the same
    tokens whatever building the model drew (random weights or a checkpoint, any layout)."""
    shape = (train["micro_batch"], train["seq_len"])
    vocab = model_plan["config"]["vocab_size"]
    tokens = torch.Generator().manual_seed(train["seed"])
    return {"input_ids": torch.randint(0, vocab, shape, generator=tokens).to(device)}


def step_draws(batch: dict) -> dict:
    """No random draws in a step (the labels are the inputs): nothing to fix."""
    return {}


def compute_loss(model, batch: dict, autocast, options: dict):
    """Causal language modelling: predict each next token (labels = inputs)."""
    with autocast:
        output = model(
            input_ids=batch["input_ids"],
            labels=batch["input_ids"],
            use_cache=False,
            **options,
        )
    return output.loss


DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
LIBRARIES = (
    "torch",
    "diffusers",
    "transformers",
    "accelerate",
    "optimum-habana",
    "habana-torch-plugin",
    "deepspeed",
)


def distributed_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's variables, or from Open MPI's."""
    env = os.environ
    if "RANK" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0))
    if "OMPI_COMM_WORLD_RANK" in env:  # mpirun (Gaudi's single-node launcher)
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", "29500")
        rank = int(env["OMPI_COMM_WORLD_RANK"])
        size = int(env["OMPI_COMM_WORLD_SIZE"])
        return rank, size, int(env["OMPI_COMM_WORLD_LOCAL_RANK"])
    return 0, 1, 0


def percentile(sorted_values: list, fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = (len(sorted_values) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    weight = position - low
    return sorted_values[low] * (1.0 - weight) + sorted_values[high] * weight


def container_image():
    """The container the program runs in, where its environment names one: BENCHC_CONTAINER_
    IMAGE (a job's environment may set it), Apptainer's or Singularity's image, NVIDIA's NGC
    PyTorch release; None elsewhere."""
    env = os.environ
    named = ("BENCHC_CONTAINER_IMAGE", "APPTAINER_CONTAINER", "SINGULARITY_CONTAINER")
    for name in named:
        if env.get(name):
            return env[name]
    release = env.get("NVIDIA_PYTORCH_VERSION")
    return f"NGC PyTorch {release}" if release else None


def library_versions(device) -> dict:
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    versions.update(device.versions())
    versions["container"] = container_image()
    return versions


def headline(metrics: dict) -> tuple:
    """(value, unit) of the spec's headline metric, for the console: a latency where the
    plan names its section and key, else the job's throughput."""
    latency = PLAN["headline"]
    if latency is not None:
        return metrics[latency["section"]][latency["key"]], latency["unit"]
    return metrics["throughput"]["job"], PLAN["unit"]


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


def scheduler_job():
    """The Slurm job and trial this run belongs to (job.sbatch numbers the trials), or None:
    `benchc ingest` stores the trials of one job as one series."""
    env = os.environ
    if "SLURM_JOB_ID" not in env:
        return None
    return {
        "scheduler": "slurm",
        "id": env["SLURM_JOB_ID"],
        "cluster": env.get("SLURM_CLUSTER_NAME"),
        "trial": int(env.get("BENCHC_TRIAL", "1")),
        "trials": int(env.get("BENCHC_TRIALS", "1")),
    }


class Stopped(BaseException):
    """The program received SIGTERM (or SIGINT), raised at the next safe point; `status` says
    whether the job's time limit had come (or the user interrupted).

    Never raised by the signal handler itself: an exception raised from a handler lands in
    whatever the main thread runs at that moment, torch's dispatch included, where it can
    abort the process ("terminate called after throwing an instance of 'c10::Error'"). The
    handler records the ending and sets a flag; the program's own code raises this at a safe
    point (stop_if_asked), and the watchdog ends a process that reaches none in time. A
    BaseException, so code that catches Exception lets it through; the run is classified by
    the flag, ENDING["signum"], whatever exception ends it."""

    def __init__(self, signum: int, status: str = ""):
        self.signum = signum
        self.status = status or stop_status(signum)
        super().__init__(f"received {signal.Signals(signum).name} ({self.status})")


def stop_status(signum: int) -> str:
    """interrupted for SIGINT (Ctrl-C); timeout once the job's end time has come (job.sbatch
    exports it in Unix time as BENCHC_JOB_END_TIME); else cancelled."""
    if signum == signal.SIGINT:
        return "interrupted"
    ends = os.environ.get("BENCHC_JOB_END_TIME", "")
    limit_reached = ends.isdigit() and time.time() >= int(ends) - 60
    return "timeout" if limit_reached else "cancelled"


# How the run ends, shared with the signal handler. main() names the metrics being filled,
# the file they go to and the rank, and sets `closing` once the run is over (from then on it
# records the ending itself, and a signal only wakes the watchdog). A stop signal before that
# sets `signum` and `status`, the flag every ending is classified by, and `written` once its
# record is on disk. `stop_seen`: the first stop signal's number, whenever it came.
ENDING = {
    "metrics": None,
    "path": None,
    "rank": 0,
    "signum": None,
    "status": None,
    "written": False,
    "closing": False,
    "stop_seen": None,
}
# After a stop signal the main thread has SAFE_POINT_S seconds to reach a safe point (between
# steps and phases) and unwind from there; one that reaches none (inside torch.compile, a
# long kernel, a wait that never returns) is ended by the watchdog: its child processes
# killed, then the exit with 128 + the signal, the record already on disk. Whatever happens,
# the process is gone STOP_GRACE_S seconds after the signal: below launch.sh's grace (30 s)
# and Slurm's default KillWait.
SAFE_POINT_S = 3.0
STOP_GRACE_S = 20.0
STOP_SEEN = threading.Event()  # set by the first stop signal: wakes the watchdog
AT_SAFE_POINT = threading.Event()  # set when the main thread stops at a safe point


def set_phase(metrics: dict, name: str) -> None:
    """The phase the run is in (startup, compiling, warmup, measuring): recorded, so that a
    run stopped or failed says where, and printed by rank 0 as `phase NAME`. A safe point."""
    stop_if_asked()
    metrics["phase"] = name
    if ENDING["rank"] == 0:
        print(f"phase {name}", flush=True)


def stopped_record(metrics: dict) -> dict:
    """The metrics so far as a stopped run: cancelled, timeout or interrupted, with the step
    reached (progress) and the phase the signal came in."""
    name = signal.Signals(ENDING["signum"]).name
    where = f" in phase {metrics['phase']}" if metrics.get("phase") else ""
    return {
        **metrics,
        "status": ENDING["status"],
        "error": {
            "type": "Stopped",
            "message": f"received {name} ({ENDING['status']}){where}",
            "rank": ENDING["rank"],
            "traceback": "",  # a stop raised no exception
        },
        "ended_at": utc_now(),
    }


def stop_on_signal(signum, frame):
    """SIGTERM (a scheduler's cancel or time limit, a launcher stopping the ranks) or SIGINT
    (Ctrl-C): set the flag, record the run as cancelled, timeout or interrupted at once and
    atomically (in case the process is killed before it unwinds), wake the watchdog. It
    raises nothing (see Stopped): the main thread stops at its next safe point, or the
    watchdog ends the process. A second signal changes nothing; one after the run is over
    only wakes the watchdog. (Nothing here takes a lock the interrupted code may hold.)"""
    if ENDING["stop_seen"] is not None:
        return
    ENDING["stop_seen"] = signum
    # A last resort that needs no Python thread to run (the main thread may hold the GIL in
    # C code): every thread's stack to stderr and _exit(1), some seconds after the watchdog.
    faulthandler.dump_traceback_later(STOP_GRACE_S + 10.0, exit=True)
    if not ENDING["closing"]:  # once the run is over, main() records how it ended
        ENDING["signum"], ENDING["status"] = signum, stop_status(signum)
        if ENDING["metrics"] is not None:
            # if not, main() writes it on its way out
            with contextlib.suppress(Exception):
                write_json(ENDING["path"], stopped_record(ENDING["metrics"]))
                ENDING["written"] = True
    STOP_SEEN.set()


def stop_if_asked() -> None:
    """A safe point, in the program's own code between steps and phases: after a stop signal,
    unwind from here (Stopped), never from inside torch."""
    if ENDING["signum"] is not None and not ENDING["closing"]:
        AT_SAFE_POINT.set()
        raise Stopped(ENDING["signum"], ENDING["status"])


def child_processes(pid: int) -> list:
    """Every live descendant of `pid` (Linux /proc; none elsewhere): torch.compile's compile
    workers and the compilers they run."""
    parents = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    with open(f"/proc/{entry}/stat") as stat:
                        fields = stat.read().rsplit(")", 1)[1].split()
                    if fields[0] != "Z":
                        parents[int(entry)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, of in parents.items() if of == parent]
        found += children
        frontier += children
    return found


def end_process(code: int, why: str) -> None:
    """Ends this process from the watchdog: says why, kills its child processes (nothing of
    the run is left behind), exits with `code`. The ending is already on disk."""
    print(f"bench.py: {why}", file=sys.stderr, flush=True)
    for child in child_processes(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    os._exit(code)


def watchdog() -> None:
    """A daemon thread main() starts. Once a stop signal has come: a main thread that has not
    reached a safe point within SAFE_POINT_S (it is compiling, or in a long call) is ended
    here; one that has, or a run already over, gets until STOP_GRACE_S to exit, after
    which every thread's stack is printed (where it hangs) and the process ended."""
    STOP_SEEN.wait()
    code = 128 + ENDING["stop_seen"]
    unwinding = ENDING["closing"] or AT_SAFE_POINT.wait(SAFE_POINT_S)
    if not unwinding and not ENDING["closing"]:
        name = signal.Signals(ENDING["stop_seen"]).name
        phase = (ENDING["metrics"] or {}).get("phase") or "startup"
        end_process(
            code,
            f"rank {ENDING['rank']} stopped by {name} ({ENDING['status']}) in phase {phase}, "
            f"between safe points: ending the process",
        )
    time.sleep(max(0.0, STOP_GRACE_S - SAFE_POINT_S))
    message = f"still running {STOP_GRACE_S:g} s after the stop signal; exiting"
    print(f"bench.py: {message}", file=sys.stderr, flush=True)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    end_process(code, "ended by its watchdog")


OUT_OF_MEMORY = ("out of memory", "can't allocate memory", "allocation failed")


def out_of_memory(failure: BaseException) -> bool:
    """Did an allocation that did not fit end the run? torch's OutOfMemoryError (CUDA's, and
    its accelerators'), the host allocator's (MemoryError; "DefaultCPUAllocator: can't
    allocate memory"), a device runtime's message (Gaudi's "Allocation failed"), here or in
    any exception that led to it (a compiler or a collective may wrap it)."""
    seen = set()
    while failure is not None and id(failure) not in seen:
        seen.add(id(failure))
        named = type(failure).__name__ == "OutOfMemoryError"  # torch's, on any device
        if named or isinstance(failure, MemoryError):
            return True
        if any(words in str(failure).lower() for words in OUT_OF_MEMORY):
            return True
        failure = failure.__cause__ or failure.__context__
    return False


def error_record(failure: BaseException, rank: int) -> dict:
    """What ended the run, for the metrics: its type, message, rank and traceback; an
    allocation that did not fit has cause "oom", with the memory benchc estimated beside."""
    record = {
        "type": type(failure).__name__,
        "message": str(failure),
        "rank": rank,
        "traceback": "".join(traceback.format_exception(failure))[-4000:],
        "cause": None,
    }
    if out_of_memory(failure):
        record.update(cause="oom", memory_estimate=PLAN["memory_estimate"])
    return record


def write_json(path: str, payload: dict) -> None:
    """Write atomically: a reader sees the old file or the whole new one, never half."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".metrics-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as stream:
            json.dump(payload, stream, indent=2, sort_keys=True)
            stream.write("\n")
        # mkstemp makes 0600: give the file the mode a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def start_processes(metrics: dict):
    """Join the job's process group; (rank, world size, device adapter). Records the hosts
    the ranks run on, so a multi-node run shows where it ran."""
    rank, world, local_rank = distributed_env()
    device = Device(local_rank)
    hosts = [socket.gethostname()]
    if world > 1:
        dist.init_process_group(backend=device.backend, rank=rank, world_size=world)
        hosts = [None] * world
        dist.all_gather_object(hosts, socket.gethostname())
    # the host's first rank reads what counts the whole host (RAPL, the host's cards)
    here = socket.gethostname()
    device.counts_host = hosts.index(here) == rank
    device.host_ranks = hosts.count(here)
    metrics["world_size"] = world
    metrics["hosts"] = sorted(set(hosts))
    metrics["nodes"] = len(metrics["hosts"])
    if world != PLAN["world_size"]:
        raise RuntimeError(
            f"launched with {world} processes, but the plan is for {PLAN['world_size']}"
        )
    return rank, world, device


def end_process_group() -> None:
    """The job's last collective, once rank 0 has written its metrics: a barrier (no rank
    leaves while another still needs it), then the process group ended. A failure here (a
    peer, or the launcher's rendezvous store, gone first) cannot change a measurement that
    is already on disk: it is said, not raised."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception as error:
        print(
            f"bench.py: rank {ENDING['rank']}: ending the process group failed after the "
            f"metrics were written: {type(error).__name__}: {error}",
            file=sys.stderr,
            flush=True,
        )


def distribution(values: list):
    """p50, p90, p99 and the mean of `values` and how many there were (None: there were none).
    A percentile of few values is the nearest they allow: `samples` says how many."""
    if not values:
        return None
    ordered = sorted(values)
    return {
        "p50": percentile(ordered, 0.50),
        "p90": percentile(ordered, 0.90),
        "p99": percentile(ordered, 0.99),
        "mean": statistics.fmean(values),
        "samples": len(values),
    }


def timing_summary(times: list, warmup: int) -> dict:
    """Step times after warmup (median, p10, p50, p90, p99, mean, all) and the warmup's share."""
    measured = times[warmup:]
    ordered = sorted(measured)
    return {
        "steps": {"total": len(times), "warmup": warmup, "measured": len(measured)},
        "step_time_s": {
            "median": statistics.median(measured),
            "p10": percentile(ordered, 0.10),
            "p50": percentile(ordered, 0.50),
            "p90": percentile(ordered, 0.90),
            "p99": percentile(ordered, 0.99),
            "mean": statistics.fmean(measured),
            "all": measured,
        },
        "warmup_s": sum(times[:warmup]),
        "first_step_s": times[0],
    }


def flops_summary(flops_per_sample, samples_per_s_per_device: float) -> dict:
    """Model FLOP/s per device and MFU against the target's peak (None when unknown)."""
    achieved = flops_per_sample * samples_per_s_per_device if flops_per_sample else None
    peak = PLAN["peak_flops_per_device"]
    return {
        "model_flops_per_sample": flops_per_sample,
        "achieved_per_device": achieved,
        "peak_per_device": peak,
        "mfu": achieved / peak if achieved and peak else None,
    }


@contextlib.contextmanager
def made_on(device, dtype=None):
    """Tensors made inside are made on the device, and floating ones in `dtype` (None: fp32):
    a model with no weights is built and initialised where it runs, in its precision, never
    on the host first."""
    previous = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


# Measured windows: at least this many steps, or this many seconds, whichever comes first
# (a full-size plan that asks for fewer measured steps runs on until one holds).
MIN_MEASURED_STEPS = 50
MIN_MEASURED_S = 20.0


def window_steps(planned: int, step_s, world: int, device) -> int:
    """The measured steps, agreed by every rank before the window: the plan's, or at full
    size as many more as reach 50 steps or 20 s, whichever comes first, at the pace of the
    last warmup step (the slowest rank's). Without a warmup step, the plan's."""
    if PLAN["smoke"] or step_s is None or planned >= MIN_MEASURED_STEPS:
        return planned
    pace = torch.tensor([step_s], device=device.device)
    if world > 1:
        dist.all_reduce(pace, op=dist.ReduceOp.MAX)
    wanted = math.ceil(MIN_MEASURED_S / max(float(pace), 1e-6))
    return max(planned, min(MIN_MEASURED_STEPS, wanted))


def smi_output(command: list):
    """What a vendor tool (nvidia-smi, hl-smi) prints; None where it is missing or fails."""
    import subprocess  # only here: most programs never read a vendor tool

    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


def smi_rows(command: list):
    """The lines of a vendor tool's CSV query, each a list of its values; None where the
    tool is missing, fails or prints nothing."""
    lines = (smi_output(command) or "").strip().splitlines()
    return [[value.strip() for value in line.split(",")] for line in lines] or None


def query_smi(command: list, names: tuple, numbers: bool = True):
    """The first line of a vendor tool's CSV query as {name: value}: numbers where they
    parse (unless `numbers` is False: versions stay text), the tool's own text elsewhere;
    None where the tool is missing or fails. Read outside the measured window only."""
    rows = smi_rows(command)
    if rows is None:
        return None
    state = {}
    for name, value in zip(names, rows[0], strict=False):
        number = value.split(" ")[0]  # "350 W" -> "350"
        try:
            state[name] = float(number) if numbers else value
        except ValueError:
            state[name] = value
    return state


class MeasuredWindow:
    """The measured steps: the garbage collector frozen and off, one timing boundary per
    step (device events on CUDA, nothing that waits for the device), losses kept on the
    device and read once at the end, with the finite check done there too; the energy read
    at the window's edges, where the device has finished."""

    def __init__(self, device, steps: int, meter, sync_free: bool = True) -> None:
        self.device = device
        self.meter = meter  # the energy over the window (EnergyMeter)
        self.steps = steps
        # False: a step reads the device (fp16's gradient scaler)
        self.sync_free = sync_free
        # the host-sync watch the device applied over the window, if any
        self.watched = None
        self.losses = []
        self.marks = []

    def __enter__(self):
        gc.collect()
        gc.freeze()
        gc.disable()
        self.device.synchronize()
        self.device.reset_peak_memory()
        self.meter.begin()
        self.marks.append(self.device.time_mark())
        if self.sync_free:
            self.watched = self.device.watch_host_syncs(True)
        return self

    def record(self, loss) -> None:
        """After a step: its boundary, and its loss (still on the device)."""
        self.marks.append(self.device.time_mark())
        if loss is not None:
            self.losses.append(loss.detach())

    def more(self) -> bool:
        """Another step? Until the window's steps are done (the same count on every rank).
        A safe point for a stop signal (a flag read: nothing waits for the device)."""
        stop_if_asked()
        return len(self.marks) - 1 < self.steps

    def __exit__(self, *exc) -> None:
        if self.watched:
            self.device.watch_host_syncs(False)
        self.device.synchronize()  # the window's work done: the energy counted to here
        self.meter.end()
        gc.enable()
        gc.unfreeze()

    def times(self) -> list:
        """Seconds of each measured step (one wait for the device, after the window)."""
        return self.device.durations(self.marks)

    def loss_values(self) -> list:
        if not self.losses:
            return []
        values = torch.stack(self.losses).float().cpu().tolist()
        return [float(value) for value in values]


def device_state(device) -> dict:
    """The device's clocks, power and throttle state where its vendor tool exists."""
    return {"start": device.state(), "end": None}


def record_tier(metrics: dict, device) -> None:
    """The optimisation tier and every knob it turned on, and the numerics set for it."""
    metrics["optimize"] = PLAN["optimize"]["tier"]
    metrics["optimize_detail"] = dict(PLAN["optimize"]["knobs"])
    metrics["numerics"] = device.numerics()
    compiled = PLAN["optimize"]["knobs"]["compile"] != "off"
    contiguous = compiled and device.contiguous_region_inputs
    workaround = "contiguous inputs to compiled blocks"
    metrics["workarounds"] = [workaround] if contiguous else []


def peak_rss_bytes() -> int:
    """This process's peak resident set, in bytes (Linux reports KiB): host memory, the
    interpreter, libraries and allocator included; apart from peak_memory_bytes."""
    import resource  # POSIX only, as are the programs' launchers

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def since_process_start(started: float) -> float:
    """Seconds since this process started, imports included (Linux: its start time in
    /proc); elsewhere since `started`, the top of main()."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
            age = float(uptime.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - started
    return max(age, time.perf_counter() - started)


def compile_blocks(blocks, options: dict, contiguous_inputs: bool = False) -> None:
    """Regional compilation: each repeated block compiled on its own and whole (fullgraph),
    replacing it in its list. The blocks share their compiled code, so the compile time
    does not grow with the depth; sharding wraps the compiled blocks (torchtitan's order).
    contiguous_inputs: the tensors a block is called with are made contiguous first,
    eagerly, outside the compiled code (the adapter says why)."""
    for index, block in enumerate(blocks):
        blocks[index] = torch.compile(block, fullgraph=True, **options)
        if contiguous_inputs:
            blocks[index].register_forward_pre_hook(made_contiguous, with_kwargs=True)


def made_contiguous(module, args: tuple, kwargs: dict):
    """A forward pre-hook: the call's tensors contiguous (a copy only where they are not)."""

    def made(value):
        return value.contiguous() if isinstance(value, torch.Tensor) else value

    return tuple(made(a) for a in args), {k: made(v) for k, v in kwargs.items()}


def use_compile_cache(metrics: dict) -> None:
    """Records where Inductor keeps its compile cache, where anything is compiled: launch.sh
    names a folder beside this program (unless TORCHINDUCTOR_CACHE_DIR names another), so a
    second run reuses what the first compiled."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    compiled = PLAN["optimize"]["knobs"]["compile"] != "off"
    metrics["compile_cache"] = os.path.abspath(folder) if compiled and folder else None


class PowerSampler:
    """A device's power read every `period` seconds on a thread of its own, as a running
    integral in joules (each reading held until the next, the trapezoid between them): for a
    device with no energy counter. The thread never touches the device's queue of work, so a
    measured step waits for nothing; its reads cost the host a little time, which the docs
    say."""

    def __init__(self, watts, period: float) -> None:
        # () -> the power now, in watts (raises where the tool fails)
        self.watts = watts
        self.period = period
        self.total = 0.0
        self.last = None  # (time, watts) of the latest reading
        self.failure = None
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.read()  # the first reading, here: a tool that does not answer fails now
        self.thread = threading.Thread(target=self.run, name="power", daemon=True)
        self.thread.start()

    def read(self) -> None:
        now, power = time.perf_counter(), float(self.watts())
        with self.lock:
            if self.last is not None:
                self.total += (now - self.last[0]) * (self.last[1] + power) / 2
            self.last = (now, power)

    def run(self) -> None:
        while not self.done.wait(self.period):
            try:
                self.read()
            except Exception as error:  # the reason is kept: no figure
                self.failure = error
                return

    def joules(self) -> float:
        """The integral up to now (the latest reading held to now)."""
        if self.failure is not None:
            raise self.failure
        with self.lock:
            held, power = self.last
            return self.total + (time.perf_counter() - held) * power

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=2 * self.period + 10)


class EnergyMeter:
    """The energy the job's devices used over its measured work. The adapter gives this
    rank's reader (device.energy_reader): a counter in joules read at the edges of each
    measured part, after the device has finished it, or a PowerSampler's integral; none
    where another rank of the host reads the host's counter, or none with the reason.
    summary() sums every rank's joules into the job's."""

    def __init__(self, reading: tuple) -> None:
        self.reader, self.source, self.why = reading  # device.energy_reader()
        self.joules = 0.0
        self.seconds = 0.0
        self.began = None

    def read(self):
        try:
            return self.reader.joules()
        except Exception as error:  # a tool that stops answering: the reason
            self.why = f"{self.source} stopped answering: {error}"
            self.reader = None
            return None

    def begin(self) -> None:
        """A measured part starts (the device has finished what came before)."""
        if self.reader is not None:
            joules = self.read()
            self.began = None if joules is None else (time.perf_counter(), joules)

    def end(self) -> None:
        """The measured part is over (the device has finished it)."""
        if self.began is None or self.reader is None:
            return
        began_s, began_j = self.began
        self.began = None
        joules = self.read()
        if joules is not None:
            self.joules += joules - began_j
            self.seconds += time.perf_counter() - began_s

    def close(self) -> None:
        with contextlib.suppress(Exception):
            getattr(self.reader, "close", lambda: None)()

    def summary(self, units: float, world: int, device) -> dict:
        """The job's energy over the measured work: every rank's joules summed (a host's
        counter read by one rank of the host), per unit of work (images or tokens) and as
        mean watts over the seconds between the reads (rank 0's: the first rank of its host
        always reads); null figures and the reason where a rank could not read its part.
        A collective where there are several ranks: every rank calls it."""
        self.close()
        reads = self.reader is not None or self.why is not None  # this rank has a part
        missing = self.why is not None
        # fp32: every backend sums it
        totals = torch.tensor([self.joules, missing, reads])
        whys = [self.why]
        if world > 1:
            totals = totals.to(device.device)
            dist.all_reduce(totals)
            totals = totals.cpu()
            whys = [None] * world
            dist.all_gather_object(whys, self.why)
        joules, missed, parts = float(totals[0]), int(totals[1]), int(totals[2])
        seconds = self.seconds if self.seconds > 0 else None
        why = next((w for w in whys if w), None)
        if why is None and (joules <= 0 or units <= 0):
            why = f"{self.source}: no energy counted over the measured work"
        if why is not None:
            if 0 < missed < parts:
                why = f"{missed} of the {parts} ranks that read energy: {why}"
            return {"joules": None, "per_unit_j": None, "mean_w": None,
                    "seconds": seconds, "source": self.source, "why": why}  # fmt: skip
        return {
            "joules": joules,
            "per_unit_j": joules / units,
            "mean_w": joules / seconds if seconds else None,
            "seconds": seconds,
            "source": self.source,
            "why": None,
        }


# Where the profiled steps' device time goes. A run profiles (PLAN's measure.profile, or
# --profile) a few more steps AFTER the measured window, under torch.profiler: the headline
# is never measured with the profiler on.
PROFILE_CATEGORIES = (
    "matmul",
    "attention",
    "norm_elementwise",
    "communication",
    "optimizer",
    "copy",
    "other",
    "idle",
)
# An event inside one of these ranges (an enclosing op or a record_function range) counts
# for the range's category, whatever its own name: the first rule one of them matches.
PROFILE_RANGE_RULES = (
    ("optimizer", "optimizer.step optimizer.zero_grad".split()),
    ("attention", "scaled_dot_product attention sdpa fmha flash_attn".split()),
)
# Otherwise the event's own name (an operator on the CPU, a kernel on an accelerator),
# lower-cased: the first rule with a part of it. Order matters: "aten::addmm" is a matmul
# before "aten::add" makes it elementwise, and Inductor's matmul templates (triton_tem_*)
# before its other generated kernels (pointwise, reductions).
PROFILE_NAME_RULES = (
    (
        "communication",
        "nccl hccl c10d gloo record_param_comms all_reduce allreduce all_gather allgather "
        "reduce_scatter alltoall broadcast_".split(),
    ),
    ("copy", "memcpy memset copy".split()),
    ("attention", "scaled_dot_product attention sdpa fmha flash".split()),
    ("optimizer", "multi_tensor adam foreach optimizer sgd".split()),
    (
        "matmul",
        "gemm cutlass xmma matmul cublas nvjet triton_tem aten::mm aten::addmm aten::bmm "
        "aten::baddbmm aten::linear aten::conv aten::_convolution mkldnn_linear "
        "mkldnn_convolution".split(),
    ),
    (
        "norm_elementwise",
        "norm elementwise reduce vectorized softmax triton_ gelu silu sigmoid tanh relu "
        "aten::add aten::sub aten::mul aten::div aten::neg aten::exp aten::log aten::pow "
        "aten::sqrt aten::rsqrt aten::mean aten::sum aten::where aten::clamp aten::sin "
        "aten::cos aten::lerp aten::fill_ aten::zero_ aten::mse_loss aten::cat aten::argmax "
        "aten::masked_fill".split(),
    ),
)
PROFILE_TOP = 5  # the longest events of each category kept in the metrics
PROFILE_TRAIN_STEPS = 3  # training steps profiled (at most the measured steps)


def profile_category(name: str, ranges=()) -> str:
    """The category of one profiled event: `name` (an operator or a kernel) and the names of
    the ranges around it, innermost first. Pure and table-driven (the tables above)."""
    enclosing = [outer.lower() for outer in ranges]
    for category, parts in PROFILE_RANGE_RULES:
        if any(part in outer for outer in enclosing for part in parts):
            return category
    lowered = name.lower()
    for category, parts in PROFILE_NAME_RULES:
        if any(part in lowered for part in parts):
            return category
    return "other"


def profile_summary(spans: list, wall_s: float, steps: int, activity: str) -> dict:
    """The metrics' "profile" object from the profiled events, each (name, enclosing range
    names, busy seconds, interval): seconds per category summed over the steps, the longest
    names of each, and idle, the profiled wall time the device ran none of them: wall minus
    the union of the intervals (an accelerator's kernels, which may overlap), or minus the
    summed busy time where events have no interval (operators' self times on the CPU)."""
    seconds = dict.fromkeys(PROFILE_CATEGORIES, 0.0)
    named = {}
    for name, ranges, busy, _ in spans:
        category = profile_category(name, ranges)
        seconds[category] += busy
        total, calls = named.get((category, name), (0.0, 0))
        named[(category, name)] = (total + busy, calls + 1)
    busy_s, reach = 0.0, None
    intervals = sorted(span[3] for span in spans if span[3] is not None)
    for start, end in intervals:
        if reach is None or start > reach:
            busy_s, reach = busy_s + end - start, end
        elif end > reach:
            busy_s, reach = busy_s + end - reach, end
    busy_s += sum(span[2] for span in spans if span[3] is None)
    seconds["idle"] = max(wall_s - busy_s, 0.0)
    top = {category: [] for category in PROFILE_CATEGORIES if category != "idle"}
    longest = sorted(named.items(), key=lambda item: -item[1][0])
    for (category, name), (total, calls) in longest:
        if len(top[category]) < PROFILE_TOP:
            top[category].append({"name": name[:200], "s": total, "calls": calls})
    return {
        "steps": steps,
        "profiled_s": wall_s,
        "activity": activity,
        "categories": seconds,
        "top": top,
        "trace": None,
    }


def profiled_spans(events, activity: str) -> list:
    """(name, enclosing range names innermost first, busy s, (start s, end s) or None) of
    what the device ran: on the CPU each operator's self time (nesting not counted twice),
    on an accelerator each kernel, with the operator that launched it and its ranges."""
    cpu = torch.autograd.DeviceType.CPU
    launchers = {}  # host operators by id: a kernel's linked_correlation_id names its own
    for event in events:
        host = event.device_type == cpu and not event.is_async
        if host and not event.linked_correlation_id:
            launchers.setdefault(event.id, event)

    def ranges(event) -> tuple:
        found = []
        while event is not None:
            found.append(event.name)
            event = event.cpu_parent
        return tuple(found)

    spans = []
    for event in events:
        # a range is not work (its operators and kernels are); on the device too (CUDA's
        # gpu_user_annotation spans the kernels launched inside a range)
        kind = str(getattr(event, "activity_type", ""))
        if event.is_user_annotation or "annotation" in kind or event.is_async:
            continue
        if event.is_python_function:
            continue
        if activity == "cpu" and event.device_type == cpu:
            busy = event.self_cpu_time_total / 1e6
            spans.append((event.name, ranges(event.cpu_parent), busy, None))
        elif activity != "cpu" and event.device_type != cpu:
            launcher = launchers.get(event.linked_correlation_id)
            start, end = event.time_range.start / 1e6, event.time_range.end / 1e6
            spans.append((event.name, ranges(launcher), end - start, (start, end)))
    return spans


def trace_path(metrics_path: str) -> str:
    """The chrome trace's file, beside the metrics file: metrics.json -> profile-trace.json,
    metrics-2.json (a Slurm job's second trial) -> metrics-2.profile-trace.json."""
    folder, name = os.path.split(metrics_path)
    stem = os.path.splitext(name)[0]
    trace = "profile-trace.json" if stem == "metrics" else f"{stem}.profile-trace.json"
    return os.path.join(folder, trace)


def profile_steps(device, rank: int, steps: int, run_step, trace_to: str):
    """`steps` more calls of run_step(index) on every rank (the same collectives on all),
    recorded by torch.profiler on rank 0 only, timed with the measured window's boundary.
    Rank 0 writes the chrome trace to `trace_to` and returns the "profile" object."""
    recording = rank == 0
    activities = device.profiler_activities() if recording else []
    profiler = torch.profiler.profile(activities=activities) if recording else None
    gc.collect()
    device.synchronize()
    with profiler or contextlib.nullcontext():
        marks = [device.time_mark()]
        for index in range(steps):
            run_step(index)
            marks.append(device.time_mark())
        wall_s = sum(device.durations(marks))
    if not recording:
        return None
    spans = profiled_spans(profiler.events(), device.family)
    summary = profile_summary(spans, wall_s, steps, device.family)
    folder = os.path.dirname(os.path.abspath(trace_to))
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".trace-", suffix=".json")
    os.close(handle)
    try:
        profiler.export_chrome_trace(temporary)
        umask = os.umask(0)  # mkstemp makes 0600: the mode a plain open() would give
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, trace_to)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    summary["trace"] = os.path.basename(trace_to)
    return summary


def build_on_meta(model_plan: dict, on_meta: bool, device, dtype=None):
    """The model, with its parameters on the meta device (no memory) when on_meta: they are
    allocated later, shard by shard, by materialise(). Buffers (rotary and position tables)
    are small and computed at construction, so they are built for real and kept. With local
    weights, the model of their config (the plan's) is built there, not loaded."""
    if not on_meta:
        return build_on_device(model_plan, device, dtype), {}
    with made_on(device, dtype), init_empty_weights(include_buffers=False):
        model = build_model({**model_plan, "weights": None})
    tie_embeddings(model)  # before sharding, which then keeps the one parameter whole
    return model, {name: b.to(device) for name, b in model.named_buffers()}


def tie_embeddings(model) -> None:
    """A tied output head made the input embedding again (transformers' tie_weights). A tie is
    one Parameter held by two modules, and building on the meta device (each assignment makes
    a new meta Parameter) or to_empty (each module's parameter made anew) breaks it: the head
    would be a second matrix, never read from local weights (they hold it once). Left alone
    where a split layer replaced the head (DeepSpeed's AutoTP: each rank holds some of its
    columns), on every rank alike."""
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    if not tied or not hasattr(model, "tie_weights"):
        return
    if type(model.get_output_embeddings()) is torch.nn.Linear:
        model.tie_weights()


def materialise(model, buffers: dict, device, weights=None) -> None:
    """Allocate this rank's shards, put the buffers back, and initialise the parameters, or
    read each one's local part from the local weights."""
    model.to_empty(device=device)
    tie_embeddings(model)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            buffer.copy_(buffers[name])
    initialize_weights(model)


def build_on_device(model_plan: dict, device, dtype=None):
    """The model where it runs: with no weights, every parameter is made and initialised on
    the device itself, in `dtype` (None: fp32), never on the host first; local weights are
    loaded, then moved."""
    if model_plan["weights"]:
        return build_model(model_plan).to(device)
    with made_on(device, dtype):
        model = build_model(model_plan)
    return model.to(device)  # a table a library computed on the host, if any


TORCH_OPTIMIZERS = {
    "adamw": torch.optim.AdamW,
    "adam": torch.optim.Adam,
    "sgd": torch.optim.SGD,
}


# The first step against an eager forward of the same weights, batch and random draws, before
# any optimizer step: the relative difference of their losses allowed per precision. A
# compiler's bug on a chip nobody here has tried ends the run as `numerics`, with both
# values, rather than becoming a benchmark number.
FIRST_STEP_TOLERANCE = {"fp32": 1e-3, "bf16": 2e-2, "fp16": 1e-2}


class NumericsMismatch(RuntimeError):
    """The first step's loss is not the eager forward's, within the precision's tolerance."""


def first_step_check(reference: float, first: float, world: int, device) -> dict:
    """The first step's loss against the eager reference's, on every rank (each its own
    batch): the record for the metrics, `passed` only where every rank's is within the
    tolerance (the worst difference agreed by all, so all end alike)."""
    tolerance = FIRST_STEP_TOLERANCE[PLAN["train"]["precision"]]
    finite = math.isfinite(reference) and math.isfinite(first)
    scale = max(abs(reference), 1e-12)
    difference = abs(first - reference) / scale if finite else math.inf
    worst = torch.tensor([difference], device=device.device)
    if world > 1:
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    worst = float(worst)
    return {
        "reference": "eager forward: same weights, batch and draws; torch.compile off; no grad",
        "compiled": PLAN["optimize"]["knobs"]["compile"] != "off",
        "reference_loss": reference if math.isfinite(reference) else None,
        "first_loss": first if math.isfinite(first) else None,
        "relative_difference": difference if finite else None,
        "worst_relative_difference": worst if math.isfinite(worst) else None,
        "tolerance": tolerance,
        "passed": worst <= tolerance,
    }


def check_first_step(metrics: dict, reference: float, first: float, world: int, device):
    """The first-step check recorded in the metrics; a failed one ends the run (numerics)."""
    check = first_step_check(reference, first, world, device)
    metrics["first_step_check"] = check
    if not check["passed"]:
        raise numerics_error(check, reference, first)


def numerics_error(check: dict, reference: float, first: float) -> NumericsMismatch:
    """What a failed first-step check says: both losses and by how much they differ."""
    precision = PLAN["train"]["precision"]
    what = "compiled " if check["compiled"] else ""
    allowed = f"{precision} allows {check['tolerance']:.2%}"
    own = check["relative_difference"]
    if own is None or own > check["tolerance"]:
        by = "" if own is None else f" by {own:.2%}"
        return NumericsMismatch(
            f"the {what}first step's loss {first:.6g} differs from an eager forward's "
            f"{reference:.6g} on the same weights and batch{by} ({allowed}): the {what}code "
            f"computes something else on this machine"
        )
    worst = check["worst_relative_difference"]
    by = "by more than the tolerance" if worst is None else f"by {worst:.2%}"
    return NumericsMismatch(
        f"another rank's {what}first step differs from its eager forward {by} ({allowed}); "
        f"here {first:.6g} against {reference:.6g}"
    )


def train(metrics: dict, started: float, trace_to=None) -> None:
    rank, world, device = start_processes(metrics)
    run, model_plan = PLAN["train"], PLAN["model"]
    record_tier(metrics, device)
    use_compile_cache(metrics)
    # The same initial weights on every rank (sharding splits them as they are).
    torch.manual_seed(run["seed"])
    device.before_model()
    # The runtime layer (below the core): the model, its sharding and optimizer, one step.
    step, eager_loss = prepare_training(device, world, metrics)
    torch.manual_seed(run["seed"] + rank)  # different data on every rank
    batch = synthetic_batch(run, model_plan, device.device)
    # The first step's batch with its random draws fixed, and its loss by an eager forward
    # (the reference of the first-step check), before anything is compiled or updated.
    first_batch = {**batch, **step_draws(batch)}
    reference = eager_loss(first_batch)
    if not math.isfinite(reference):
        raise FloatingPointError(f"loss is {reference} in a forward before any step")
    metrics["startup_s"] = since_process_start(started)
    metrics["device_state"] = device_state(device)
    # Warmup on exactly the measured shapes, each step waited for; the first one compiles.
    compiled = PLAN["optimize"]["knobs"]["compile"] != "off"
    warmup_times, losses = [], []
    for index in range(run["warmup"]):
        stop_if_asked()  # a safe point: between steps
        metrics["progress"] = {"step": index + 1, "of": run["steps"]}
        if index == 0:
            set_phase(metrics, "compiling" if compiled else "warmup")
        begin = time.perf_counter()
        loss = step(first_batch if index == 0 else batch)
        device.synchronize()
        warmup_times.append(time.perf_counter() - begin)
        losses.append(float(loss))
        if index == 0:
            check_first_step(metrics, reference, losses[0], world, device)
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"loss is {losses[-1]} at step {index + 1}")
        if index == 0 and compiled:
            metrics["compile_s"] = warmup_times[0]
            set_phase(metrics, "warmup")
        if rank == 0:
            print(
                f"step {index + 1}/{run['steps']} loss {losses[-1]:.4f} "
                f"time {warmup_times[-1]:.3f}s (warmup)",
                flush=True,
            )
    # The measured window: nothing in it waits for the device (MeasuredWindow).
    set_phase(metrics, "measuring")
    pace = warmup_times[-1] if warmup_times else None
    steps = window_steps(run["steps"] - run["warmup"], pace, world, device)
    total = run["warmup"] + steps
    # fp16's gradient scaler reads found_inf from the device once per step (docs/programs.md)
    meter = EnergyMeter(device.energy_reader())
    window = MeasuredWindow(device, steps, meter, sync_free=run["precision"] != "fp16")
    with window:
        index = run["warmup"]
        shown, shown_index = time.perf_counter(), index
        while window.more():
            metrics["progress"] = {"step": index + 1, "of": total}
            window.record(step(first_batch if index == 0 else batch))
            index += 1
            now = time.perf_counter()
            if rank == 0 and (now - shown >= 1.0 or not window.more()):
                # the host's mean step time since the last line: progress, not the measurement
                mean = (now - shown) / (index - shown_index)
                print(f"step {index}/{total} time {mean:.3f}s", flush=True)
                shown, shown_index = now, index
    step_times = window.times()
    metrics["host_sync_watch"] = window.watched
    measured_losses = window.loss_values()
    if run["warmup"] == 0:  # the first step was measured: its loss is read only now
        check_first_step(metrics, reference, measured_losses[0], world, device)
    bad = [i for i, value in enumerate(measured_losses) if not math.isfinite(value)]
    if bad:
        at = run["warmup"] + bad[0] + 1
        raise FloatingPointError(f"loss is {measured_losses[bad[0]]} at step {at}")
    metrics["device_state"]["end"] = device.state()
    peak = torch.tensor([float(device.peak_memory_bytes())], device=device.device)
    if world > 1:
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if trace_to is not None:  # a few more steps, after the measured ones, profiled
        set_phase(metrics, "profiling")
        profiled = min(PROFILE_TRAIN_STEPS, steps)
        profile = profile_steps(device, rank, profiled, lambda _: step(batch), trace_to)
        if profile is not None:
            metrics["profile"] = profile
    items = run["global_batch"] * len(step_times) * PLAN["items_per_sample"]
    energy = meter.summary(items, world, device)  # a collective: every rank
    samples_per_s = run["global_batch"] * len(step_times) / sum(step_times)
    items_per_s = samples_per_s * PLAN["items_per_sample"]  # images, or tokens
    losses += measured_losses
    metrics.update(
        status="ok",
        device_name=device.device_name(),
        versions=library_versions(device),
        **timing_summary(warmup_times + step_times, run["warmup"]),
        throughput={
            "unit": PLAN["unit"],
            "job": items_per_s,
            "per_device": items_per_s / world,
            "samples_per_step": run["global_batch"],
        },
        loss={"first": losses[0], "last": losses[-1], "all": losses},
        peak_memory_bytes=int(peak.item()),
        peak_rss_bytes=peak_rss_bytes(),
        peak_reserved_memory_bytes=device.peak_reserved_bytes(),
        flops=flops_summary(PLAN["train_flops_per_sample"], samples_per_s / world),
        energy=energy,
    )
    if compiled and warmup_times:  # compile reported apart from the rest of the warmup
        metrics["warmup_s"] = sum(warmup_times[1:])
