"""Minimal reproduction, ready to report upstream: Inductor's C++ code for one diffusers
JointTransformerBlock under CPU autocast bf16 gave NaN when the block's input was a transpose.

Seen on a 2-core Intel Xeon with AMX and AVX512-BF16 (torch 2.13.0+cpu, diffusers 0.35.1):
NaN at the first compiled bf16 step of benchc's S1 smoke, and from this script's default
case; finite with the input made contiguous, or with Inductor's vector width at 256 bits. On
another AMX Xeon (KVM, family 6 model 167, 2026-12-06) every case is right, so print what
differs between machines with the result. No upstream issue matching it was found.

    python benchmarks/repro_inductor_bf16_nan.py            # the block as SD3 calls it
    python benchmarks/repro_inductor_bf16_nan.py contiguous # its input made contiguous first
    python benchmarks/repro_inductor_bf16_nan.py simdlen256 # Inductor's 256-bit code

Each case compares the compiled block's outputs with eager bf16 on the same weights and
inputs; exit status 1 where an output is not finite or differs by more than 0.1.
"""

from __future__ import annotations

import copy
import platform
import sys

import torch
import torch._inductor.config as inductor_config
from diffusers.models.attention import JointTransformerBlock


def cpu_flags() -> str:
    """The flags that decide Inductor's code and oneDNN's kernels on this CPU."""
    wanted = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "amx_fp16")
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    present = set(line.split(":", 1)[1].split())
                    return " ".join(f for f in wanted if f in present)
    except OSError:
        pass
    return "unknown"


def main(case: str) -> int:
    if case == "simdlen256":
        inductor_config.cpp.simdlen = 256
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    torch.manual_seed(0)
    block = JointTransformerBlock(
        dim=64, num_attention_heads=2, attention_head_dim=32, context_pre_only=False
    )
    batch, image_tokens, text_tokens = 8, 64, 16
    # SD3's patch embedding returns flatten(2).transpose(1, 2): a transpose, not contiguous
    hidden = torch.randn(batch, 64, image_tokens).transpose(1, 2)
    if case == "contiguous":
        hidden = hidden.contiguous()
    context, temb = torch.randn(batch, text_tokens, 64), torch.randn(batch, 64)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        eager = block(hidden_states=hidden, encoder_hidden_states=context, temb=temb)
        compiled = torch.compile(copy.deepcopy(block), fullgraph=True)
        outputs = compiled(hidden_states=hidden, encoder_hidden_states=context, temb=temb)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, flags: {cpu_flags()}")
    print(f"ATen capability {torch.backends.cpu.get_cpu_capability()}, Inductor ISA {pick_vec_isa()}")
    wrong = False
    for name, reference, output in zip(("context", "hidden"), eager, outputs, strict=True):
        finite = bool(torch.isfinite(output).all())
        difference = (reference.float() - output.float()).abs().max().item() if finite else float("nan")
        wrong |= not finite or difference > 0.1
        print(
            f"{case or 'default'}: {name} output finite={finite}, max |compiled - eager| = {difference:.3g}"
        )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
