"""The bytes a Flux transformer's blocks save for the backward, per token: memory/activations.py's
activations for `model flux`. No torch.

One job: Flux's per-token formulas, read off diffusers' FluxTransformerBlock and
FluxSingleTransformerBlock and measured with torch's saved-tensor hooks on the real blocks
(tests/test_flux.py holds each formula to that measurement, with and without autocast). b:
bytes of matmul activations, n: of layer-norm tensors, r: of the residual stream, h: the
hidden size; under autocast (n > b) every Linear casts its input anew. Per token:
- double-stream block (either stream): its two LayerNorms' input and output, three at n
  (the fourth shares the residual), the q/k/v input (one cast, or three under autocast), the
  out projection's input and output (the gate's), fc1's output and the GELU's (8bh), the q/k
  RMSNorms' fp32 input and normalised copies (4 x 4h), q k v as attended (3bh, both streams
  joined) and the attention's output; the softmax statistics 4 B per head and the norms' ones
- single-stream block: its LayerNorm's input (r) and output (n), the q/k/v/MLP input (one
  cast, or four), q k v and the attention output (4bh), the out projection's output (the
  gate's), the concatenation of attention and MLP (5bh, the out projection's input), the
  GELU's input (4bh), the RMSNorms' fp32 copies (16h), the statistics (3 x 4 B per head)
Eager attention adds the scores, b x heads x s per token.
"""

from __future__ import annotations

FP32 = 4
MLP = 4  # Flux's MLP ratio in both kinds of block


def _casts(b: int, n: int, separate: int) -> int:
    """Copies of one input its Linear layers cast: one, or `separate` under autocast."""
    return separate if n > b else 1


def double_block(b: int, n: int, r: int, h: int, heads: int, s: int, eager: bool) -> dict[str, float]:
    """Bytes per token of one double-stream block (either stream), and of its MLP half."""
    attend = b * heads * s if eager else 0
    casts = _casts(b, n, 3)
    full = (3 * n + (3 + casts) * b + 2 * MLP * b + 3 * b + b) * h + 4 * FP32 * h + 4 * FP32 * heads + attend
    mlp = (n + b + 2 * MLP * b + b) * h  # its LayerNorm's output, fc1's input, fc1 and GELU outputs, fc2's
    return {"full": full, "mlp": mlp}


def single_block(b: int, n: int, r: int, h: int, heads: int, s: int, eager: bool) -> dict[str, float]:
    """Bytes per token of one single-stream block, and of its MLP part."""
    attend = b * heads * s if eager else 0
    casts = _casts(b, n, 4)
    full = (
        (r + n + casts * b + 4 * b + b + (1 + MLP) * b + MLP * b) * h
        + 4 * FP32 * h
        + 3 * FP32 * heads
        + attend
    )
    mlp = (b + MLP * b) * h  # the MLP projection's input and the GELU's input
    return {"full": full, "mlp": mlp}
