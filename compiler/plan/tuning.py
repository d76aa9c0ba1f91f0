"""The optimisation tier of a plan: which knobs `optimize = plain | tuned` turns on here.

The tier never changes the mathematics (model, precision, batch): only how it is executed.
`plain` is the framework as shipped; `tuned` is each vendor's documented best path. Settings
that overlap the tier (`train.compile`, `attention`) win over it. The knobs are derived once,
here, from the tier, the target's family, the model, the runtime and the sharding, and are
what the program does, what its metrics record (`optimize_detail`) and what reports show.
docs/programs.md has the table of what each knob means per target, with its sources.
"""

from __future__ import annotations

from ..records import frozen

TIERS = ("plain", "tuned")
DEFAULT_TIER = "tuned"

# The SDPA kernels a spec's `attention = fused` means on CUDA, in each tier's order: tuned
# tries cuDNN first (fastest on Hopper for these head sizes), plain keeps torch's own order.
CUDA_FUSED = {"tuned": "cudnn>flash>efficient", "plain": "flash>efficient>cudnn"}
# Generation brings an attention mask, which the flash kernel does not take.
CUDA_FUSED_MASKED = {"tuned": "cudnn>efficient", "plain": "efficient>cudnn"}


@frozen
class Tuning:
    """What the tier turned on for one plan; every value is a short word a report can print."""

    tier: str  # plain | tuned
    compile: str  # regional (each repeated block by torch.compile, fullgraph) | on (generation:
    # the decode step compiled whole: by benchc's loop, or by transformers in generate) | off
    attention: str  # the attention kernel(s), e.g. cudnn>flash>efficient, FusedSDPA, math
    qkv: str | None  # fused | separate (models that offer fused projections); None: n/a
    optimizer: str | None  # fused | default (training); None: inference
    hpu_mode: str | None  # Gaudi: lazy | eager; None elsewhere
    cudnn_benchmark: bool | None  # CUDA: cuDNN's autotuner for convolutions; None elsewhere
    decode: str | None = None  # generation: loop (benchc's fixed-length decode loop, greedy on
    # the device, no per-token host sync) | generate (the framework's generate); None elsewhere

    def knobs(self) -> dict[str, str]:
        """Knob -> value, only the knobs that apply (the metrics' optimize_detail)."""
        knobs = {"compile": self.compile, "attention": self.attention}
        if self.qkv is not None:
            knobs["qkv"] = self.qkv
        if self.optimizer is not None:
            knobs["optimizer"] = self.optimizer
        if self.hpu_mode is not None:
            knobs["hpu_mode"] = self.hpu_mode
        if self.cudnn_benchmark is not None:
            knobs["cudnn_benchmark"] = "on" if self.cudnn_benchmark else "off"
        if self.decode is not None:
            knobs["decode"] = self.decode
        return knobs

    def describe(self) -> str:
        """One line: "tuned: compile=regional, attention=cudnn>flash>efficient, ..."."""
        return f"{self.tier}: " + ", ".join(f"{k}={v}" for k, v in self.knobs().items())


def _attention(kernel: str, family: str, tier: str, masked: bool) -> str:
    if family == "hpu":
        return "FusedSDPA" if kernel == "fused" else {"eager": "math"}.get(kernel, "sdpa")
    if kernel == "fused" and family == "cuda":
        return (CUDA_FUSED_MASKED if masked else CUDA_FUSED)[tier]
    if kernel == "fused":
        return "flash"  # PyTorch's flash kernel for the CPU
    return {"eager": "math", "sdpa": "sdpa default", "flash": "flash", "xformers": "xformers"}[kernel]


def derive(
    tier: str,
    family: str,
    fused_qkv_offered: bool | None,
    training: bool,
    attention: str,
    explicit_compile: bool | None,
    runtime: str = "torch",
    sharding: str = "none",
    precision: str = "bf16",
    static_cache: bool = True,
) -> Tuning:
    """The knobs of one plan. `fused_qkv_offered`: the model offers fused q/k/v projections
    (True), offers them only at other mathematics (False), or has none to offer (None).
    `explicit_compile` is the spec's train.compile / infer.compile (None: not written, the
    tier decides). `static_cache`: generation with a static KV cache (the decode loop needs one)."""
    tuned = tier == "tuned"
    deepspeed = sharding.startswith("zero")
    pipeline = fused_qkv_offered is not None and not training  # the SD3 pipeline's MMDiT
    generation = fused_qkv_offered is None and not training  # Llama's generation
    # Generation, tuned, on CUDA and the CPU: benchc's decode loop (a fixed number of tokens,
    # greedy on the device, no per-token host sync; the decode step compiled whole on CUDA).
    # Gaudi keeps optimum-habana's generate, already such a loop there (ignore_eos: a host
    # counter decides the end; static shapes; HPU graphs). Plain: generate as users call it.
    loop = generation and tuned and family != "hpu" and static_cache
    if explicit_compile is not None:
        compiled = explicit_compile
    else:
        # Regional compilation where the torch runtime owns the model on CUDA (training, and the
        # SD3 pipeline's MMDiT). The CPU's compile is optional (Inductor's C++ build takes
        # minutes for the smoke models) and DeepSpeed and accelerate wrap the model themselves
        # (not generated yet with compile). Generation's compile is transformers' own.
        on_cuda = family == "cuda" and runtime == "torch" and not deepspeed
        compiled = tuned and on_cuda and (training or pipeline or loop)
    compile_ = ("regional" if training or pipeline else "on") if compiled else "off"
    # diffusers' MMDiT offers fused q/k/v projections (fuse_qkv_projections), whose processor
    # applies no q/k norm: offered only without qk_norm. Gaudi's joint-attention processor and
    # xformers' read the separate projections; Llama offers none.
    qkv = None
    if fused_qkv_offered is not None:
        fused = fused_qkv_offered and tuned and family != "hpu" and attention != "xformers"
        qkv = "fused" if fused and training else "separate"
    optimizer = None
    if training:
        optimizer = "fused" if tuned else "default"
        if family == "hpu" and sharding == "fsdp":  # FusedAdamW sizes state of whole parameters
            optimizer = "default"
        if sharding == "fsdp" and precision == "fp16":
            # torch's fused Adam(W) subtracts ShardedGradScaler's found_inf (shape [1]) from its
            # step counts (shape []) and fails: the foreach kernels there
            optimizer = "default"
    hpu_mode = None
    if family == "hpu":
        hpu_mode = "lazy" if tuned and not compiled else "eager"
    return Tuning(
        tier=tier,
        compile=compile_,
        # generation (the only inference without the pipeline's MMDiT) is masked
        attention=_attention(attention, family, tier, masked=not training and fused_qkv_offered is None),
        qkv=qkv,
        optimizer=optimizer,
        hpu_mode=hpu_mode,
        cudnn_benchmark=tuned if family == "cuda" else None,
        decode=("loop" if loop else "generate") if generation else None,
    )
