"""Per-device memory of one plan, part by part, against the target's memory. No torch.

One job: the bytes each device holds at its peak — weights, gradients, optimizer state,
working copies, activations, KV cache — as the generated programs really keep them, and
whether their sum fits the target's `memory_gb`. Every formula, with its assumptions and what
it leaves out, is in docs/estimate.md; in brief (P parameters, N the data-parallel degree,
b bytes of the compute precision: 2 for bf16/fp16, 4 for fp32):

training: the peak of a step is the largest of its moments (training_phases), each summing
what is held then: the forward's end (every unit's saved tensors), each unit of the backward
(the head, each block's MLP then its attention, the embeddings: the gradients made so far,
the saved tensors not yet freed, and under FSDP2 the all-gather, compute and reduce-scatter
of each block) and the optimizer step. The parts listed are those of that moment (Memory.phase):
- sharding none (one device, or DDP): fp32 weights 4P and AdamW moments 8P throughout; fp32
  gradients 4P only from the backward (or from the first micro batch's: grad_accum > 1);
  DDP's gradient buckets 4P unless gradient_as_bucket_view (the Gaudi adapter sets it: the
  gradients are then the buckets); autocast's b-byte weight copies, saved for the backward
- fsdp (FSDP2, world > 1): 4P/N weights and 8P/N moments; the root gathered in b; per block
  its gathered parameters, the next block's, its gradients in b and the reduce-scatter's
  fp32 buffers (x 2 on the CPU: gloo's copy); 4P/N gradient shards as the blocks reduce (all
  of them from the start where earlier micro batches reduced theirs: every micro batch does)
- zero1/2/3 (DeepSpeed, the model cast to b): weights bP (bP/N for ZeRO-3, with a b-byte
  gradient partition); fp32 master and moments (4 + 8)P/N; the reduce bucket (5e8 elements,
  allocated whole) and its flattened gradients; gradients bP (ZeRO-1) or an fp32 partition
  (ZeRO-2; ZeRO-1 and 3 at the step); for ZeRO-3 the parameters gathered
activations: a per-layer formula in bytes per token (_mmdit_block, _llama_layer), x tokens x
micro batch; with activation checkpointing each layer keeps only its input, and one layer is
recomputed at a time. Beside them the synthetic batch, the loss's tensors and the model's
buffers (the MMDiT's position table).
inference: weights in b (tensor parallel splits each layer's projections, embeddings and head
replicated); the static KV cache 2 x layers x batch x kv_heads/t x head_dim x (in + out) x b;
a working set for the largest transient tensors; for SD3 what the pipeline call holds (its
text context is CLIP's 77 tokens + t5_tokens, not the MMDiT's text_tokens).
build: where the program builds the whole model (training: fp32) before sharding or splitting
it (not on the meta device, not under ZeRO-3), 4P on every device and what the build makes
beside it; the peak is the larger of that and the steady parts above.

Checked against real CPU runs (tests/test_memory_estimate.py): every layout's traced peak is
at most the estimate and at least 0.9 of it.

capacity: the target's `memory_gb`; the cpu target states none, so its capacity is this host's
physical memory shared by the node's processes (host / devices_per_node per process), read by
host_memory() when estimated and never written into a plan.

The parallel layout (world size, effective sharding, DeepSpeed's stage, the meta-device build)
is read from plan.dims (plan/parallel.py), never derived here.

The modules, each importing only from those above it:
- parts.py: the constants (bytes per precision, DeepSpeed's defaults) and the records, Part
  and Memory
- flux.py: the bytes per token a Flux block saves for the backward
- parameters.py: parameters per part of the model, of one block and the root, and per device
  for inference (local_weights)
- activations.py: the bytes each kind of layer saves for the backward (_mmdit_block,
  _llama_layer, Flux's) and a micro batch's activations (training_activations)
- units.py: the backward's units in their order (backward_units), and what a step holds beside
  the weights: optimizer state, buffers, batch and loss, gradient flow, the step's temporaries
- build.py: the model built whole before it is sharded or split (whole_build, build_formula)
- phases.py: the moments of a training step per sharding (training_phases) and the peak
- inference.py: KV cache, an inference call's working set, what a pipeline call holds
- estimate.py: the capacity (host_memory on the cpu) and estimate_memory, which adds it all up
"""

from __future__ import annotations

from .activations import eager_attention, training_activations
from .build import build_formula, whole_build
from .estimate import estimate_memory, host_memory
from .inference import inference_working, kv_cache, pipeline_held, pipeline_text_tokens
from .parameters import block_and_root, local_weights, parameters
from .parts import (
    BYTES,
    FP32,
    GB,
    HOST_MEMORY_VARIABLE,
    OPTIMIZER_STATES,
    TIGHT,
    ZERO3_LIVE,
    ZERO3_PREFETCH,
    ZERO_REDUCE_BUCKET,
    Memory,
    Part,
)
from .phases import Phase, peak_phase, training_phases
from .units import (
    Unit,
    backward_units,
    largest_parameter,
    model_buffers,
    optimizer_states,
    training_batch,
)

__all__ = [
    "BYTES",
    "FP32",
    "GB",
    "HOST_MEMORY_VARIABLE",
    "OPTIMIZER_STATES",
    "TIGHT",
    "ZERO3_LIVE",
    "ZERO3_PREFETCH",
    "ZERO_REDUCE_BUCKET",
    "Memory",
    "Part",
    "Phase",
    "Unit",
    "backward_units",
    "block_and_root",
    "build_formula",
    "eager_attention",
    "estimate_memory",
    "host_memory",
    "inference_working",
    "kv_cache",
    "largest_parameter",
    "local_weights",
    "model_buffers",
    "optimizer_states",
    "parameters",
    "peak_phase",
    "pipeline_held",
    "pipeline_text_tokens",
    "training_activations",
    "training_batch",
    "training_phases",
    "whole_build",
]
