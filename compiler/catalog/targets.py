"""The target table: one record of facts per device a spec can target. Data, not if-chains.

Peak figures are dense (no sparsity) TFLOP/s per device, from the vendors' datasheets.
Interconnect figures are GB/s per device *per direction* (a full-duplex link moves this much
each way at once; vendors often quote the sum of both directions): scale-up between the
devices of one node, scale-out from a device to other nodes. Each target states where they come
from in `interconnect_source`; a scale-out figure is a node design choice (NICs per node), so
it is that of the vendor's reference node, said as "assumed typical node".
A fact we do not know is None and stays None: MFU for such a target is reported as null,
never computed from another device's numbers, and no bound is drawn from it.
"""

from __future__ import annotations

from dataclasses import field, replace

from ..records import frozen

PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
ATTENTION_KERNELS = ("eager", "sdpa", "fused", "flash", "xformers")


@frozen
class Target:
    name: str
    family: str  # "hpu" | "cuda" | "cpu": which adapter of the generated program runs it
    device_name: str
    peak_tflops: dict[str, float | None]  # precision -> dense peak per device; None = unknown
    memory_gb: float | None  # device memory as the vendor states it (decimal GB)
    hbm_tb_s: float | None  # memory bandwidth, TB/s
    devices_per_node: int | None  # devices in one standard node; None = no fixed count
    precisions: tuple[str, ...]  # precisions this target's software stack runs
    unsupported_precisions: dict[str, str]  # precision -> why not, and what to do instead
    attention: dict[str, str]  # kernel name in a spec -> what the program uses for it
    unsupported_attention: dict[str, str]  # kernel -> why not, and what to do instead
    attention_precisions: dict[str, tuple[str, ...]]  # kernel -> the only precisions it runs
    distributed_backend: str  # torch.distributed backend
    launchers: tuple[str, ...]  # first = default
    graphs: str | None  # what infer.graphs runs on this target; None: refused, see no_graphs
    no_graphs: str | None  # why not, and what to write instead
    facts_source: str = field(
        default="vendor datasheets: dense (no sparsity) peaks; memory and HBM bandwidth as published"
    )
    scale_up_gb_s: float | None = None  # per device, per direction, to the devices of its node
    scale_out_gb_s: float | None = None  # per device, per direction, to other nodes
    interconnect_source: str = "unknown: no interconnect bound is drawn"

    def peak_flops(self, precision: str) -> float | None:
        tflops = self.peak_tflops.get(precision)
        return None if tflops is None else tflops * 1e12


_GAUDI_ATTENTION = {
    "sdpa": "diffusers' default processor: torch.nn.functional.scaled_dot_product_attention",
    "fused": "FusedSDPA (habana_frameworks.torch.hpex.kernels), via optimum-habana processors",
}
_GAUDI_NO_ATTENTION = {
    "eager": "the Gaudi program has no separate eager attention; write attention = sdpa or fused",
    "flash": "flash-attention is a CUDA kernel; on Gaudi write attention = fused (FusedSDPA)",
    "xformers": "xFormers is a CUDA library; on Gaudi write attention = fused (FusedSDPA)",
}
_GAUDI_NO_PRECISION = {
    "fp16": "optimum-habana rejects fp16 ('not supported by optimum-habana'); Gaudi recipes use "
    "bf16: write `on <target> { train.precision = bf16 }` to keep fp16 for the other targets",
}
# PyTorch's flash-attention backend on CUDA has kernels for fp16 and bf16 only.
_CUDA_FLASH_PRECISIONS = {"fused": ("bf16", "fp16"), "flash": ("bf16", "fp16")}
_CUDA_ATTENTION = {
    "eager": "explicit matmul-softmax attention",
    "sdpa": "torch.nn.functional.scaled_dot_product_attention (backend chosen by PyTorch)",
    "fused": "scaled_dot_product_attention restricted to the flash-attention backend",
    "flash": "scaled_dot_product_attention restricted to the flash-attention backend",
    "xformers": "xformers.ops.memory_efficient_attention",
}
_CPU_ATTENTION = {
    "eager": "explicit matmul-softmax attention",
    "sdpa": "torch.nn.functional.scaled_dot_product_attention",
    "fused": "scaled_dot_product_attention (PyTorch's fused flash kernel for CPU)",
}
_CPU_NO_ATTENTION = {
    "flash": "flash-attention is a CUDA kernel; on cpu write attention = fused or sdpa "
    "(e.g. `on cpu { train.attention = sdpa }`)",
    "xformers": "xFormers runs only on CUDA; on cpu write attention = fused or sdpa "
    "(e.g. `on cpu { train.attention = sdpa }`)",
}
_GAUDI_LAUNCHERS = ("python", "mpirun", "deepspeed")  # see codegen/launchers.py for the rule
_CUDA_LAUNCHERS = ("python", "torchrun")
_CUDA_GRAPHS = "CUDA graphs: torch.compile(mode='reduce-overhead') of the decode step or the MMDiT"


_GAUDI2 = Target(
    name="gaudi2",
    family="hpu",
    device_name="Intel Gaudi 2 (HL-225)",
    peak_tflops={"fp32": None, "bf16": 432.0, "fp16": 432.0, "fp8": 865.0},
    memory_gb=96,
    hbm_tb_s=2.46,
    devices_per_node=8,
    precisions=("fp32", "bf16", "fp8"),
    unsupported_precisions=_GAUDI_NO_PRECISION,
    attention=_GAUDI_ATTENTION,
    unsupported_attention=_GAUDI_NO_ATTENTION,
    attention_precisions={},
    distributed_backend="hccl",
    launchers=_GAUDI_LAUNCHERS,
    graphs="HPU graphs (habana_frameworks wrap_in_hpu_graph; optimum-habana's use_hpu_graphs)",
    no_graphs=None,
    # 24 x 100 GbE RoCE v2 ports on the chip (2.4 Tb/s = 300 GB/s each way, 600 both ways);
    # in Intel's HLS-Gaudi2 node 21 of them join the 8 cards all-to-all (3 to each peer) and 3
    # go out of the node.
    scale_up_gb_s=262.5,  # 21 x 100 Gb/s
    scale_out_gb_s=37.5,  # 3 x 100 Gb/s
    interconnect_source="Intel Gaudi 2 datasheet: 24 x 100 GbE RoCE ports per chip; HLS-Gaudi2 "
    "reference node: 21 ports all-to-all inside the node (262.5 GB/s each way), 3 ports "
    "(37.5 GB/s each way) out of it, assumed typical node",
)

_H100 = Target(
    name="h100",
    family="cuda",
    device_name="NVIDIA H100 80GB HBM3 (SXM)",
    peak_tflops={"fp32": None, "bf16": 989.0, "fp16": 989.0, "fp8": 1979.0},
    memory_gb=80,
    hbm_tb_s=3.35,
    devices_per_node=8,
    precisions=("fp32", "bf16", "fp16", "fp8"),
    unsupported_precisions={},
    attention=_CUDA_ATTENTION,
    unsupported_attention={},
    attention_precisions=_CUDA_FLASH_PRECISIONS,
    distributed_backend="nccl",
    launchers=_CUDA_LAUNCHERS,
    graphs=_CUDA_GRAPHS,
    no_graphs=None,
    scale_up_gb_s=450.0,  # NVLink 4: 18 links, 900 GB/s both ways
    scale_out_gb_s=50.0,  # one 400 Gb/s NIC per GPU
    interconnect_source="NVIDIA H100 SXM datasheet: NVLink 900 GB/s (both ways; 450 each way); "
    "scale-out: DGX H100 / HGX reference node, 8 x 400 Gb/s ConnectX-7 InfiniBand, one per GPU "
    "(50 GB/s each way), assumed typical node",
)


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        _GAUDI2,
        # Same software stack as Gaudi 2; the chip's own peaks, memory and bandwidth.
        replace(
            _GAUDI2,
            name="gaudi3",
            device_name="Intel Gaudi 3 (HL-325L)",
            peak_tflops={"fp32": None, "bf16": 1835.0, "fp16": 1835.0, "fp8": 1835.0},
            memory_gb=128,
            hbm_tb_s=3.67,
            scale_up_gb_s=525.0,  # 21 x 200 Gb/s
            scale_out_gb_s=75.0,  # 3 x 200 Gb/s
            interconnect_source="Intel Gaudi 3 white paper: 24 x 200 GbE RoCE ports per chip; "
            "HLS-Gaudi3 reference node: 21 ports all-to-all inside the node (525 GB/s each way), "
            "3 ports (75 GB/s each way) out of it, assumed typical node",
        ),
        Target(
            name="a100",
            family="cuda",
            device_name="NVIDIA A100-SXM4-80GB",
            peak_tflops={"fp32": None, "bf16": 312.0, "fp16": 312.0, "fp8": None},
            memory_gb=80,
            hbm_tb_s=2.04,
            devices_per_node=8,
            precisions=("fp32", "bf16", "fp16"),
            unsupported_precisions={
                "fp8": "the A100 (Ampere) has no FP8 tensor cores; use bf16 or fp16 on a100",
            },
            attention=_CUDA_ATTENTION,
            unsupported_attention={},
            attention_precisions=_CUDA_FLASH_PRECISIONS,
            distributed_backend="nccl",
            launchers=_CUDA_LAUNCHERS,
            graphs=_CUDA_GRAPHS,
            no_graphs=None,
            scale_up_gb_s=300.0,  # NVLink 3: 12 links, 600 GB/s both ways
            scale_out_gb_s=25.0,  # one 200 Gb/s NIC per GPU
            interconnect_source="NVIDIA A100 datasheet: NVLink 600 GB/s (both ways; 300 each "
            "way); scale-out: DGX A100 reference node, 8 x 200 Gb/s HDR InfiniBand, one per GPU "
            "(25 GB/s each way), assumed typical node",
        ),
        _H100,
        # Same chip and software as the H100; more and faster memory.
        replace(
            _H100,
            name="h200",
            device_name="NVIDIA H200 (SXM)",
            memory_gb=141,
            hbm_tb_s=4.8,
            interconnect_source="NVIDIA H200 SXM datasheet: NVLink 900 GB/s (both ways; 450 each "
            "way); scale-out: DGX H200 reference node, 8 x 400 Gb/s ConnectX-7, one per GPU "
            "(50 GB/s each way), assumed typical node",
        ),
        Target(
            name="cpu",
            family="cpu",
            device_name="host CPU",
            peak_tflops={"fp32": None, "bf16": None, "fp16": None, "fp8": None},
            memory_gb=None,
            hbm_tb_s=None,
            devices_per_node=None,
            precisions=("fp32", "bf16", "fp16"),
            unsupported_precisions={
                "fp8": "fp8 matmuls need Gaudi or H100-class tensor cores; on cpu use bf16",
            },
            attention=_CPU_ATTENTION,
            unsupported_attention=_CPU_NO_ATTENTION,
            attention_precisions={},
            distributed_backend="gloo",
            launchers=("python", "torchrun"),
            graphs=None,
            no_graphs="the CPU has no graph replay; write `on cpu { infer.graphs = false }`",
            facts_source="no peak figures: MFU is not reported for cpu",
            interconnect_source="no figures: the host's processes talk through shared memory or "
            "the network, which benchc does not know",
        ),
    )
}
