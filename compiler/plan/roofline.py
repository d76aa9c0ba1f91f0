"""Lower bounds on the time of one plan's timed unit, hence upper bounds on its throughput. No torch.

One job: for a training step, an SD3 pipeline call, or an LLM prefill and decode, the least
time each resource needs — the device's dense peak FLOP/s for the FLOPs (plan/flops.py), its
HBM bandwidth for the bytes that must be read or written, and the interconnect (the target's
scale-up and scale-out GB/s per device) for the bytes collectives must move — which of them
binds, what that allows in the spec's metric, and what a published reference implies against
it. A bound from a figure the target table does not know is None, never guessed. Each bound
leaves work out (it is a floor, not a prediction): docs/estimate.md lists what and why.

A training step is two phases in turn: the forward and backward passes (their collectives
overlap them at best), then the optimizer step, which needs every gradient and so cannot
overlap them: one pass over the parameters this device updates (P, or P/N sharded) reading the
fp32 weight, the gradient and each fp32 state tensor and writing the weight and the states,
bound by HBM bandwidth (its elementwise FLOPs are not counted).

Collectives: a group of n nodes x g devices per node runs the bandwidth-optimal
hierarchical algorithm; per device, an all-reduce (k = 2) or an all-gather/reduce-scatter
(k = 1) of S bytes moves k (g - 1)/g S over scale-up and k (n - 1)/n S/g over scale-out.
The layout (nodes, world size, sharding, ZeRO stage) is read from plan.dims (plan/parallel.py).

Ceilings: the datasheet's, or measured ones (`roofline(plan, ceilings)`, plan/bounds.py:
matmul FLOP/s, copy bandwidth, bus bandwidth; a figure not measured stays the datasheet's,
marked so). The module is just over 400 lines: each phase's bounds sit with their arithmetic.
"""

from __future__ import annotations

from collections import Counter

from ..catalog.metrics import METRICS
from ..figures import normal_unit, sig
from ..records import frozen
from .bounds import Bound, Ceilings, measured_compute, measured_interconnect, measured_memory
from .bounds import gb as _gb
from .flops import causal_lm_generate_flops
from .memory import BYTES, FP32, local_weights, parameters
from .types import CausalLM, InferWorkload, Plan

RECOMPUTE = 4 / 3  # activation checkpointing runs the forward again: 4 passes' FLOPs, not 3


@frozen
class Phase:
    name: str  # forward+backward | optimizer (training), call (SD3), prefill | decode
    bounds: tuple[Bound, ...]

    @property
    def binding(self) -> Bound | None:
        known = [b for b in self.bounds if b.seconds is not None]
        return max(known, key=lambda b: b.seconds) if known else None

    @property
    def seconds(self) -> float | None:
        return None if self.binding is None else self.binding.seconds


@frozen
class Roofline:
    phases: tuple[Phase, ...]
    metric: str
    unit: str
    lower_is_better: bool
    best: float | None  # the metric's best possible value for the job (None: no bound)
    world: int
    flops_per_item: float  # model FLOPs per unit of the metric's work (image, token, sequence)
    items_per_unit: str  # what that unit is
    items: float = 0.0  # units of work the job does in one timed unit (step, call, generate)
    peak_flops: float | None = None  # the target's dense peak per device, in the plan's precision
    hbm_tb_s: float | None = None

    @property
    def seconds(self) -> float | None:
        times = [p.seconds for p in self.phases]
        return None if any(t is None for t in times) else sum(times)

    def _total(self, name: str) -> float:
        return sum(b.amount for p in self.phases for b in p.bounds if b.name == name)

    @property
    def memory_bytes(self) -> float:
        """HBM bytes one device moves over the timed unit (every phase's memory bound)."""
        return self._total("memory")

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte of HBM traffic of one device over the timed unit: the x of a roofline plot."""
        nbytes = self._total("memory")
        return self._total("compute") / nbytes if nbytes else None

    @property
    def memory_bound(self) -> float | None:
        """The job's throughput (units of work per second) that the HBM bandwidth alone allows."""
        floors = [next((b.seconds for b in p.bounds if b.name == "memory"), None) for p in self.phases]
        if not floors or any(f is None for f in floors) or not sum(floors):
            return None
        return self.items / sum(floors)

    def record(self) -> dict:
        """As plain data: what `benchc estimate --json` prints and each build's manifest keeps
        (in its plan, for the report)."""
        return {
            "phases": [
                {
                    "name": phase.name,
                    "binding": phase.binding.name if phase.binding else None,
                    "seconds": phase.seconds,
                    "bounds": [
                        {"name": b.name, "seconds": b.seconds, "amount": b.amount, "detail": b.detail}
                        for b in phase.bounds
                    ],
                }
                for phase in self.phases
            ],  # fmt: skip
            "seconds": self.seconds,
            "metric": self.metric,
            "unit": self.unit,
            "lower_is_better": self.lower_is_better,
            "best": self.best,
            "best_per_device": None if self.best is None or self.lower_is_better else self.best / self.world,
            "flops_per_item": self.flops_per_item,
            "items_per_unit": self.items_per_unit,
            "items": self.items,
            "world": self.world,
            "intensity_flops_per_byte": self.intensity,
            "memory_bound_items_per_s": self.memory_bound,
            "peak_flops_per_device": self.peak_flops,
            "hbm_tb_s": self.hbm_tb_s,
        }


def _compute(plan: Plan, flops: float, what: str, ceilings: Ceilings | None = None) -> Bound:
    if ceilings is not None:
        return measured_compute(plan, flops, what, ceilings)
    peak = plan.target.peak_flops(plan.workload.precision)
    if peak is None:
        return Bound(
            "compute",
            None,
            f"{flops:.3e} FLOPs; no {plan.workload.precision} peak for {plan.target.name}",
            flops,
        )
    return Bound("compute", flops / peak, f"{flops:.3e} FLOPs ({what}) / {peak / 1e12:g} TFLOP/s "
                 f"{plan.workload.precision} peak", flops)  # fmt: skip


def _memory(plan: Plan, nbytes: float, what: str, ceilings: Ceilings | None = None) -> Bound:
    if ceilings is not None:
        return measured_memory(plan, nbytes, what, ceilings)
    bandwidth = plan.target.hbm_tb_s
    if bandwidth is None:
        return Bound("memory", None, f"{_gb(nbytes)} ({what}); no HBM bandwidth for {plan.target.name}",
                     nbytes)  # fmt: skip
    return Bound("memory", nbytes / (bandwidth * 1e12), f"{_gb(nbytes)} ({what}) / {bandwidth:g} TB/s HBM",
                 nbytes)  # fmt: skip


def _interconnect(
    plan: Plan, collectives: list[tuple[str, float, int, float]], ceilings: Ceilings | None = None
) -> Bound | None:
    """collectives: (what, bytes S, k, count) over a group of all nodes x devices_per_node."""
    n, g = plan.dims.nodes, plan.dims.devices_per_node
    up = sum(count * k * (g - 1) / g * size for _, size, k, count in collectives)
    out = sum(count * k * (n - 1) / n * size / g for _, size, k, count in collectives)
    if not up and not out:
        return None
    if ceilings is not None:
        return measured_interconnect(plan, collectives, ceilings, up, out)
    t = plan.target
    what = " + ".join(f"{count:g} x {name}" for name, _, _, count in collectives)
    times, parts = [], []
    for volume, bandwidth, link in ((up, t.scale_up_gb_s, "scale-up"), (out, t.scale_out_gb_s, "scale-out")):
        if not volume:
            continue
        if bandwidth is None:
            return Bound("interconnect", None, f"{what}: {_gb(volume)} per device over {link}, "
                         f"whose bandwidth {t.name} does not state", up + out)  # fmt: skip
        times.append(volume / (bandwidth * 1e9))
        parts.append(f"{_gb(volume)} / {bandwidth:g} GB/s {link}")
    return Bound("interconnect", max(times), f"{what}: " + ", ".join(parts) + " per device", up + out)


def _passes(plan: Plan, ceilings: Ceilings | None = None) -> Phase:
    w, p, dims = plan.workload, plan.cost.params, plan.dims
    b, world = BYTES[w.precision], dims.world_size
    checkpointing = plan.parallel.activation_checkpointing
    flops = plan.cost.train_flops_per_sample * w.global_batch / world * (RECOMPUTE if checkpointing else 1)
    what = f"global batch {w.global_batch} / {world} devices" + (", x 4/3 recompute" if checkpointing else "")
    bounds = [_compute(plan, flops, what, ceilings)]
    passes = 3 if checkpointing else 2
    traffic = w.grad_accum * (passes + 1) * b * p
    what = f"{w.grad_accum} x ({passes} weight reads + 1 gradient write) x {b} B x P"
    bounds.append(_memory(plan, traffic, what, ceilings))
    collectives = []
    if dims.distributed and dims.effective_sharding == "none":
        collectives = [("all-reduce of fp32 gradients", FP32 * p, 2, 1)]
    elif dims.fsdp:
        # FSDP2 reduce-scatters on every micro batch (both runtimes)
        collectives = [(f"all-gather of {b}-byte weights", b * p, 1, 2 * w.grad_accum),
                       ("reduce-scatter of fp32 gradients", FP32 * p, 1, w.grad_accum)]  # fmt: skip
    elif dims.distributed:  # DeepSpeed ZeRO: 16-bit gradients and weights
        stage = dims.zero_stage
        reduces = w.grad_accum if stage >= 2 else 1
        collectives = [(f"reduce-scatter of {b}-byte gradients", b * p, 1, reduces)]
        if stage == 3:
            collectives.append((f"all-gather of {b}-byte weights", b * p, 1, 2 * w.grad_accum))
        else:
            collectives.append((f"all-gather of updated {b}-byte weights", b * p, 1, 1))
    link = _interconnect(plan, collectives, ceilings)
    return Phase("forward+backward", tuple(bounds + ([link] if link else [])))


def optimizer_bytes(states: int, grad: int = FP32) -> int:
    """HBM bytes one fused optimizer kernel moves per parameter (torch's fused Adam(W), Habana's
    FusedAdamW): read the fp32 weight, the gradient and each fp32 state tensor, write the weight
    and the states. AdamW and Adam: two states (exp_avg, exp_avg_sq), 4 + 4 + 8 read + 4 + 8
    written = 28; a fused SGD with momentum would move 20, plain SGD 12."""
    return FP32 + grad + FP32 * states + FP32 + FP32 * states


# torch's default weight decay of each optimizer the spec may name (torch.optim's signatures)
DEFAULT_WEIGHT_DECAY = {"adamw": 0.01, "adam": 0.0, "sgd": 0.0}
# torch's unfused Adam(W) step (the foreach kernels, or the same operations per tensor on the
# CPU), per parameter: exp_avg lerp to the gradient (3 x 4), exp_avg_sq scaled (2 x 4) and
# added the gradient's square (3 x 4), its square root (2 x 4) divided (2 x 4) and added eps
# (2 x 4) into a new tensor, the weight updated from exp_avg and it (4 x 4)
UNFUSED_ADAM = 12 + 8 + 12 + 8 + 8 + 8 + 16


def fused_optimizer(plan: Plan) -> bool:
    """Whether the program's optimizer step is one fused kernel: where the tier's optimizer knob
    says fused, torch's Adam(W)(fused=True) on CUDA and the CPU, Habana's FusedAdamW (AdamW
    only) on Gaudi; SGD always runs torch's unfused step (the adapters pass fused for Adam(W))."""
    name = plan.workload.optimizer.name
    if plan.tuning is None or plan.tuning.optimizer != "fused":
        return False
    return name == "adamw" if plan.target.family == "hpu" else name in ("adamw", "adam")


def optimizer_traffic(plan: Plan) -> tuple[tuple[str, float], ...]:
    """The optimizer step's HBM bytes per parameter updated, part by part, for the program's
    path: the fused kernel or torch's unfused passes (weight decay, momentum and nesterov as
    the spec's arguments say), gradient clipping, fp16's GradScaler, DeepSpeed's casts between
    its fp32 partition and the 16-bit model. Closed forms in docs/estimate.md; work done only
    when the data says so (DeepSpeed scaling gradients whose norm is above the limit) is left
    out: a floor."""
    w = plan.workload
    o, b = w.optimizer, BYTES[w.precision]
    decay = float(o.args.get("weight_decay", DEFAULT_WEIGHT_DECAY.get(o.name, 0.0)) or 0.0)
    parts: list[tuple[str, float]] = []
    if fused_optimizer(plan):
        parts.append((f"fused {o.name}: the fp32 weight, gradient and 2 moments read, the weight and "
                      "moments written", optimizer_bytes(2)))  # fmt: skip
    elif o.name in ("adamw", "adam"):
        parts.append((f"{o.name} unfused: 8 passes over the moments, the gradient and the weight",
                      UNFUSED_ADAM))  # fmt: skip
        if decay and o.name == "adamw":
            parts.append(("decoupled weight decay: the weight read and written", 2 * FP32))
        elif decay:
            parts.append(("weight decay: the gradient and weight read, a new gradient written", 3 * FP32))
    else:  # torch's SGD, unfused
        parts.append(("sgd: the weight and its step read, the weight written", 3 * FP32))
        if float(o.args.get("momentum", 0) or 0):
            parts.append(("momentum: the buffer scaled (read, written), the gradient added (2 read, "
                          "1 written)", 5 * FP32))  # fmt: skip
            if o.args.get("nesterov"):
                parts.append(("nesterov: the gradient and buffer read, the step written", 3 * FP32))
        if decay:
            parts.append(("weight decay: the gradient and weight read, a new gradient written", 3 * FP32))
    if plan.dims.deepspeed:
        parts.append((f"DeepSpeed: its {b}-byte gradients cast to the fp32 partition, the updated "
                      f"partition copied back to {b}-byte weights", 2 * (b + FP32)))  # fmt: skip
        if w.grad_clip:
            parts.append((f"clipping: the norm of the {b}-byte gradients read", b))
        if w.precision == "fp16":
            parts.append((f"fp16: the overflow check reads the {b}-byte gradients, the unscaling reads "
                          "and writes the fp32 partition's", b + 2 * FP32))  # fmt: skip
    else:
        if w.grad_clip:
            parts.append(("clipping: the norm reads the gradients, the scaling reads and writes them",
                          3 * FP32))  # fmt: skip
        if w.precision == "fp16":
            parts.append(("fp16 GradScaler: the inf check and unscaling read and write the gradients",
                          2 * FP32))  # fmt: skip
    return tuple(parts)


def _optimizer(plan: Plan, ceilings: Ceilings | None = None) -> Phase:
    """The optimizer step after the backward: this device's parameters (P, or P/N where the
    states are sharded) through the passes of optimizer_traffic. The gradient it reads is fp32
    in every generated program: DDP's of fp32 weights, FSDP2's reduce-scatter in fp32,
    DeepSpeed's fp32 partition."""
    p, n = plan.cost.params, plan.dims.data
    sharded = plan.dims.effective_sharding != "none"
    parts = optimizer_traffic(plan)
    per = sum(nbytes for _, nbytes in parts)
    if len(parts) > 1:
        what = "; ".join(f"{text} ({nbytes:g})" for text, nbytes in parts)
        what += ": " + " + ".join(f"{nbytes:g}" for _, nbytes in parts) + " ="
    else:
        what = parts[0][0] + ":"
    what += f" {per:g} B x P" + (" / N" if sharded else "")
    return Phase("optimizer", (_memory(plan, per * (p / n if sharded else p), what, ceilings),))


def _training(plan: Plan, ceilings: Ceilings | None = None) -> tuple[Phase, Phase]:
    """Forward and backward, then the optimizer step: in turn, so their times add up."""
    return _passes(plan, ceilings), _optimizer(plan, ceilings)


def kv_bucket(plan: Plan) -> int | None:
    """What one generation step's attention reads of the KV cache: the keys up to the filled
    length rounded up to this many. 1 for a dynamic cache (exactly the filled keys); the plan's
    decode_bucket where the decode is bucketed (benchc's decode loop, tuned on CUDA and the
    CPU; optimum-habana's generate with bucket_internal, tuned on Gaudi); None where every step
    reads the whole static cache (the plain tier: transformers' generate on CUDA and the CPU,
    optimum-habana's padded to the full length on Gaudi)."""
    w, tuning = plan.workload, plan.tuning
    if w.kv_cache == "dynamic":
        return 1
    bucketed = tuning is not None and (tuning.decode == "loop" or tuning.hpu_decode == "bucketed")
    return w.decode_bucket if bucketed else None


def keys_read(filled: int, bucket: int | None, cache: int) -> int:
    """The keys (and values) attention reads with `filled` in a cache of `cache` keys."""
    if bucket is None:
        return cache
    return min(-(-filled // bucket) * bucket, cache)


def window_start(filled: int, window: int | None, bucket: int) -> int:
    """The first key benchc's decode loop reads in a sliding-window layer with `filled` keys in
    the cache: the oldest in the window, rounded down to the bucket (0 without a window)."""
    return max(0, (filled - window) // bucket * bucket) if window else 0


def key_rule(plan: Plan) -> str:
    """kv_bucket in words."""
    return key_rule_of(kv_bucket(plan))


def key_rule_of(bucket: int | None) -> str:
    """What attention reads of the KV cache per step, for a kv_bucket value, in words."""
    if bucket is None:
        return "the whole static cache every step"
    if bucket == 1:
        return "the filled keys of a dynamic cache"
    return f"up to the filled length rounded up to {bucket} keys"


def _generation(plan: Plan, ceilings: Ceilings | None = None) -> tuple[Phase, ...]:
    """The prefill, then the decode steps. The bytes are those the program reads and writes:
    the weights once per forward, except the input embedding, a gather that reads only the
    rows of its tokens (the output head is a matmul: its whole matrix); the keys and values
    attention reads (keys_read: up to the bucket, the whole static cache, or the filled keys)
    and the token's keys and values written."""
    m, w, t = plan.model, plan.workload, plan.dims.tensor
    b, batch, ins, outs = BYTES[w.precision], w.batch, w.input_tokens, w.output_tokens
    prefill_flops = causal_lm_generate_flops(m.census, ins, 1)
    decode_flops = plan.cost.forward_flops_per_sample - prefill_flops
    table = b * m.vocab * m.hidden  # the input embedding, whole on every device

    def weights(tokens: int) -> float:
        """The weights one forward over `tokens` tokens reads: its embedding rows, not the table;
        of a mixture of experts, the experts its tokens reach."""
        idle = b * m.census.expert_matmul / t * (1 - experts_reached(m, tokens))
        return b * local_weights(plan) - table + b * min(tokens, m.vocab) * m.hidden - idle

    per_token = 2 * m.layers * m.kv_heads / t * m.head_dim * b  # keys and values, this device
    split = f" / tensor {t}" if plan.dims.tensor_parallel else ""
    bucket, cache = kv_bucket(plan), ins + outs

    def tensor_parallel(tokens: int, per_forward: int) -> list[Bound]:
        if not plan.dims.tensor_parallel:
            return []
        size = batch * tokens * m.hidden * b
        if not m.experts:
            collectives = [(f"all-reduce of {tokens} tokens x batch x h x b", size, 2, 2 * m.layers)]
        else:  # each expert's rows reduce its own tokens' outputs: k x the tokens, over the experts reached
            reached = max(1.0, m.experts * experts_reached(m, per_forward))
            collectives = [
                (f"all-reduce of {tokens} tokens x batch x h x b (attention)", size, 2, m.layers),
                (f"all-reduce per expert reached ({reached:.3g} of {m.experts}): "
                 f"{m.experts_per_token} x the tokens in all", m.experts_per_token * size / reached, 2,
                 round(m.layers * reached)),
            ]  # fmt: skip
        link = _interconnect(plan, collectives, ceilings)
        return [link] if link else []

    # the prefill's attention reads the cache as a decode step does, but on Gaudi, where
    # bucket_internal pads the cache only after the prefill: the prompt's keys there
    hpu = plan.target.family == "hpu" and bucket is not None
    first = ins if hpu else keys_read(ins, bucket, cache)
    prefill = Phase("prefill", (
        _compute(plan, batch * prefill_flops / t, f"batch {batch} x {ins} input tokens{split}", ceilings),
        _memory(plan, weights(batch * ins) + batch * (ins + first) * per_token,
                f"the weights once, the input's KV cache written and {first} keys read", ceilings),
        *tensor_parallel(ins, batch * ins),
    ))  # fmt: skip
    steps = outs - 1
    if steps < 1:
        return (prefill,)
    # decode step j (1 .. steps) writes one token's keys, filling ins + j, and reads keys_read of
    # that in every layer; benchc's loop reads a sliding-window layer from its window's bucket on
    loop = plan.tuning is not None and plan.tuning.decode == "loop" and bucket is not None
    windows = m.census.windows if loop and any(m.census.windows) else (None,) * m.layers

    layers_of = Counter(windows)  # the layers that share a window read alike: each window once

    def layer_keys(filled: int) -> float:
        end = keys_read(filled, bucket, cache)
        return sum(n * (end - window_start(filled, w, bucket or 1)) for w, n in layers_of.items()) / m.layers

    read = sum(layer_keys(ins + j) for j in range(1, steps + 1))
    windowed = ", a sliding-window layer from its window's first bucket" if any(windows) else ""
    rule = key_rule(plan) + windowed
    decode = Phase("decode", (
        _compute(plan, batch * decode_flops / t, f"batch {batch} x {steps} decode steps{split}", ceilings),
        _memory(plan, steps * weights(batch) + batch * (read + steps) * per_token,
                f"{steps} steps x weights {_gb(weights(batch))} (the embedding's {batch} rows), + the KV "
                f"cache read ({rule}) and written", ceilings),
        *tensor_parallel(steps, batch),
    ))  # fmt: skip
    return prefill, decode


def experts_reached(m, tokens: int) -> float:
    """The expected share of a layer's experts that `tokens` tokens reach, each routed to
    experts_per_token of them, under uniform routing: 1 - (1 - k/E)^tokens (1 when dense)."""
    if not getattr(m, "experts", 0):
        return 1.0
    return 1.0 - (1.0 - m.experts_per_token / m.experts) ** tokens


def _pipeline(plan: Plan, ceilings: Ceilings | None = None) -> Phase:
    w = plan.workload
    b = BYTES[w.precision]
    counts = parameters(plan)
    encoders = sum(v for k, v in counts.items() if k not in ("transformer", "vae"))
    nbytes = b * (counts["transformer"] * w.denoising_steps + encoders)
    what = "MMDiT" if plan.model.kind == "sd3" else "Flux transformer"
    return Phase("call", (
        _compute(plan, plan.cost.forward_flops_per_sample * w.batch,
                 f"batch {w.batch} x {w.denoising_steps} steps x {2 if w.classifier_free_guidance else 1} "
                 f"{what} passes (CFG)", ceilings),
        _memory(plan, nbytes, f"{what} weights x {w.denoising_steps} steps + text encoders once", ceilings),
    ))  # fmt: skip


def roofline(plan: Plan, ceilings: Ceilings | None = None) -> Roofline:
    """The plan's roofline against the target's datasheet figures, or against `ceilings`."""
    w, metric, world = plan.workload, plan.measure.metric, plan.dims.world_size
    lower = METRICS[metric].lower_is_better
    if not isinstance(w, InferWorkload):
        phases = _training(plan, ceilings)
        tokens = w.seq_len if isinstance(plan.model, CausalLM) else 1
        items, per = w.global_batch * tokens, plan.cost.train_flops_per_sample / tokens
        label = "token" if tokens > 1 else "image"
    elif isinstance(plan.model, CausalLM):
        phases = _generation(plan, ceilings)
        items, label = w.batch * w.output_tokens, "output token"
        per = plan.cost.forward_flops_per_sample / w.output_tokens  # the sequence's, over its outputs
    else:
        phases = (_pipeline(plan, ceilings),)
        items, per, label = w.batch, plan.cost.forward_flops_per_sample, "image"
    seconds = [p.seconds for p in phases]
    best = None
    if all(s is not None for s in seconds) and sum(seconds) > 0:
        total = sum(seconds)
        best = items / total
        if metric == "s_per_image":
            best = total / max(items, 1)
        elif metric == "ttft_s":
            best = seconds[0]
        elif metric == "tpot_s":  # generation: the decode phase over its steps
            best = seconds[-1] / max(w.output_tokens - 1, 1) if len(phases) > 1 else None
    peak = plan.target.peak_flops(w.precision)
    hbm = plan.target.hbm_tb_s
    if ceilings is not None:
        peak, hbm = ceilings.peak_flops.get(w.precision) or peak, ceilings.hbm_tb_s or hbm  # as the bounds
    return Roofline(
        phases,
        metric,
        METRICS[metric].shown_unit,
        lower,
        best,
        world,
        per,
        label,
        items,
        peak,
        hbm,
    )


# ------------------------------------------------------------------ references


@frozen
class Verdict:
    label: str
    value: float
    unit: str
    per_device: bool
    mfu: float | None  # the model FLOPs utilisation the figure implies
    of_bound: float | None  # the figure over its roofline (<= 1: possible)
    bandwidth_share: float | None  # generation: the figure over the memory-bound throughput
    impossible: bool
    arithmetic: str
    # generation: the bytes per second each device moves at the figure's rate (the roofline's
    # bytes of a call over the call's time at that rate): bandwidth_share x the HBM bandwidth
    bytes_per_s: float | None = None


def judge(plan: Plan, line: Roofline, ref) -> Verdict:
    """What a published figure implies under this plan: MFU, its share of the roofline, and
    whether it beats the roofline (impossible under the stated configuration)."""
    unit = normal_unit(ref.unit)
    per_device = unit.endswith(" per device")
    base = unit.removesuffix(" per device")
    if base != normal_unit(line.unit) or ref.value <= 0:
        return Verdict(ref.label, ref.value, ref.unit, per_device, None, None, None, False,
                       f'unit "{ref.unit}" is not the metric\'s {line.unit}: not judged')  # fmt: skip
    world = line.world
    job = ref.value * world if per_device else ref.value
    if line.unit == "s/image":
        rate = 1.0 / job  # images per second
    elif line.metric in ("ttft_s", "tpot_s"):
        rate = None
    else:
        rate = job
    peak = plan.target.peak_flops(plan.workload.precision)
    mfu = None if rate is None or peak is None else rate * line.flops_per_item / world / peak
    text = [f"{ref.value:g} {ref.unit}" + (f" x {world} devices = {sig(job)} {base}" if per_device else "")]
    if line.unit == "s/image":
        text[-1] += f" = {sig(rate)} images/s"
    if rate is not None:
        achieved = rate * line.flops_per_item / world
        devices = f" / {world} devices" if world > 1 else ""
        joint = "; " if per_device or line.unit == "s/image" else " "
        text[-1] += (f"{joint}x {line.flops_per_item:.3e} FLOPs per {line.items_per_unit}{devices} = "
                     f"{sig(achieved / 1e12)} TFLOP/s per device")  # fmt: skip
        if peak is not None:
            text[-1] += f", {mfu:.0%} of the {peak / 1e12:g} TFLOP/s peak (MFU)"
    of_bound, impossible = None, False
    if line.best is not None:
        of_bound = line.best / job if line.lower_is_better else job / line.best
        impossible = of_bound > 1.0 + 1e-9
        shown = line.best / world if per_device and not line.lower_is_better else line.best
        text.append(f"the roofline allows at best {sig(shown)} {ref.unit} "
                    f"({', '.join(p.name + ' ' + p.binding.name + '-bound' for p in line.phases)}): "
                    + (f"the figure is {of_bound:.0%} of it" if not line.lower_is_better
                       else f"the figure is {of_bound:.2f}x as fast as that" if impossible
                       else f"the figure reaches {of_bound:.0%} of that speed"))  # fmt: skip
    share = moved = None
    generation = isinstance(plan.model, CausalLM) and isinstance(plan.workload, InferWorkload)
    if generation and rate is not None and line.items:
        # bound by memory: the figure as the bytes each device must move per second at its rate
        moved = job / line.items * line.memory_bytes
        text.append(f"at that rate each device moves {sig(moved / 1e12)} TB/s (the roofline's bytes)")
        if line.memory_bound is not None:
            share = job / line.memory_bound
            text[-1] += (f", {share:.0%} of its {line.hbm_tb_s:g} TB/s HBM bandwidth: the share of the "
                         "throughput the bandwidth alone allows")  # fmt: skip
    if impossible:
        text.append(
            "impossible under the stated configuration: the published run must differ "
            "(fewer passes, more devices, another model or precision)"
        )
    return Verdict(
        ref.label, ref.value, ref.unit, per_device, mfu, of_bound, share, impossible, "; ".join(text), moved
    )
