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

# The SDPA kernels a spec's `attention = fused` means on CUDA under tuned, in order: cuDNN first
# (fastest on Hopper for these head sizes). Plain sets no order: torch's SDPA chooses among its
# fused kernels as shipped ("sdpa default", no sdpa_kernel context in the program).
CUDA_FUSED_TUNED = "cudnn>flash>efficient"
# Generation brings an attention mask, which the flash kernel does not take.
CUDA_FUSED_TUNED_MASKED = "cudnn>efficient"


@frozen
class Tuning:
    """What the tier turned on for one plan; every value is a short word a report can print."""

    tier: str  # plain | tuned
    compile: str  # regional (each repeated block by torch.compile, fullgraph) | on (generation:
    # the decode step compiled whole: by benchc's loop, or by transformers in generate) | whole
    # (the SD3 pipeline's MMDiT compiled as one graph, under CUDA graphs: infer.graphs on CUDA) | off
    attention: str  # the attention kernel(s), e.g. cudnn>flash>efficient, FusedSDPA, math
    qkv: str | None  # fused | separate (models that offer fused projections); None: n/a
    optimizer: str | None  # fused | default (training); None: inference
    hpu_mode: str | None  # Gaudi: lazy | eager; None elsewhere
    cudnn_benchmark: bool | None  # CUDA: cuDNN's autotuner for convolutions; None elsewhere
    decode: str | None = None  # generation: loop (benchc's fixed-length decode loop, greedy on
    # the device, no per-token host sync) | generate (the framework's generate); None elsewhere
    hpu_decode: str | None = None  # Gaudi generation: bucketed (optimum-habana's decode options for
    # Llama: bucket_internal, trim_logits, limit_hpu_graphs) | default (generate's own); None elsewhere

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
        if self.hpu_decode is not None:
            knobs["hpu_decode"] = self.hpu_decode
        return knobs

    def describe(self) -> str:
        """One line: "tuned: compile=regional, attention=cudnn>flash>efficient, ..."."""
        return f"{self.tier}: " + ", ".join(f"{k}={v}" for k, v in self.knobs().items())


def _attention(kernel: str, family: str, tier: str, masked: bool) -> str:
    if family == "hpu":
        return "FusedSDPA" if kernel == "fused" else {"eager": "math"}.get(kernel, "sdpa")
    if kernel == "fused" and family == "cuda":
        if tier == "plain":
            return "sdpa default"
        return CUDA_FUSED_TUNED_MASKED if masked else CUDA_FUSED_TUNED
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
    graphs: bool = False,
    pipeline: bool | None = None,
) -> Tuning:
    """The knobs of one plan. `fused_qkv_offered`: the model offers fused q/k/v projections
    (True), offers them only at other mathematics (False), or has none to offer (None).
    `explicit_compile` is the spec's train.compile / infer.compile (None: not written, the
    tier decides). `static_cache`: generation with a static KV cache (the decode loop needs one).
    `graphs`: the spec's infer.graphs (captured and replayed graphs). `pipeline`: inference of
    a text-to-image pipeline (None: the SD3 pipeline's MMDiT, told by fused_qkv_offered)."""
    tuned = tier == "tuned"
    deepspeed = sharding.startswith("zero")
    if pipeline is None:
        pipeline = fused_qkv_offered is not None and not training  # the SD3 pipeline's MMDiT
    generation = not pipeline and not training  # a causal LM's generation
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
    gaudi_fsdp = family == "hpu" and training and sharding == "fsdp"
    if gaudi_fsdp and explicit_compile is None and runtime == "torch":
        # Habana's FSDP runs in eager mode with torch.compile (hpu_backend; docs.habana.ai, "Using
        # Fully Sharded Data Parallel (FSDP) with Intel Gaudi"): tuned compiles each block there.
        # accelerate's FSDP has no compile generated yet: eager mode alone (the mode FSDP's own
        # all-gathers and reduce-scatters run in either way).
        compiled = tuned
    compile_ = ("regional" if training or pipeline else "on") if compiled else "off"
    if pipeline and family == "cuda" and graphs and explicit_compile is not False:
        # infer.graphs on CUDA: CUDA graphs come from torch.compile (mode reduce-overhead), over the
        # whole MMDiT call (one graph replayed per denoising step), in either tier: the setting wins.
        # Never per block: the blocks share one compiled graph, and replaying it for block i + 1
        # overwrites the output of block i it reads (pytorch/pytorch#170604). check refuses
        # graphs with infer.compile = false on CUDA.
        compile_ = "whole"
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
    hpu_mode = hpu_decode = None
    if family == "hpu":
        # Lazy mode (PT_HPU_LAZY_MODE=1) under tuned, and in either tier wherever HPU graphs are asked:
        # they exist in lazy mode only (Habana's PyTorch support matrix), and optimum-habana's generate
        # refuses them without it (transformers/generation/utils.py: "HPU graphs require `lazy_mode`").
        # Eager mode wherever anything is compiled (torch.compile's hpu_backend), under FSDP (Habana's
        # FSDP runs eagerly), and under plain otherwise: the Intel Gaudi software's own default
        # (PT_HPU_LAZY_MODE=0 in its current runtime flags table; 1 in v1.19's). docs/programs.md, Gaudi.
        lazy = (tuned or graphs) and not compiled and not gaudi_fsdp
        hpu_mode = "lazy" if lazy else "eager"
        if generation:
            hpu_decode = "bucketed" if tuned and static_cache else "default"
    return Tuning(
        tier=tier,
        compile=compile_,
        # generation (the only inference without the pipeline's MMDiT) is masked
        attention=_attention(attention, family, tier, masked=generation),
        qkv=qkv,
        optimizer=optimizer,
        hpu_mode=hpu_mode,
        cudnn_benchmark=tuned if family == "cuda" else None,
        decode=("loop" if loop else "generate") if generation else None,
        hpu_decode=hpu_decode,
    )
