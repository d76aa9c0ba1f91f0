"""The habana_frameworks symbols generated Gaudi programs may use, each with its reference.

habana_frameworks (Habana's PyTorch plugin) is not on PyPI, so generated Gaudi code cannot be
run or imported here. Tests check that every habana_frameworks symbol a generated program
uses is listed here and that every entry is used; where a reference names a file of
optimum-habana 1.21.2, a test checks that the file really uses the symbol.
"""

from __future__ import annotations

OPTIMUM_HABANA = "optimum-habana 1.21.2"

HABANA_SYMBOLS: dict[str, str] = {
    "habana_frameworks.torch.core.mark_step": (
        f"{OPTIMUM_HABANA}: optimum/habana/transformers/models/glm4v/modeling_chatglm.py; "
        "lazy mode runs the queued graph at each mark_step (platforms.md)"
    ),
    "habana_frameworks.torch.distributed.hccl": (
        "imported for its side effect of registering the 'hccl' torch.distributed backend "
        "(platforms.md, Distributed)"
    ),
    "habana_frameworks.torch.hpu.synchronize": (
        f"{OPTIMUM_HABANA}: optimum/habana/transformers/generation/utils.py"
    ),
    "habana_frameworks.torch.hpu.Event": (
        "DeepSpeed's HPU accelerator: deepspeed/accelerator/hpu_accelerator.py (Event, "
        "enable_timing; torch.cuda.Event's interface: record, elapsed_time in ms)"
    ),
    "habana_frameworks.torch.hpu.memory_stats": (
        f"{OPTIMUM_HABANA}: optimum/habana/utils/misc.py (keys InUse, MaxInUse)"
    ),
    "habana_frameworks.torch.hpu.get_device_name": (
        f"{OPTIMUM_HABANA}: optimum/habana/transformers/models/wav2vec2/modeling_wav2vec2.py"
    ),
    "habana_frameworks.torch.hpu.wrap_in_hpu_graph": (
        f"{OPTIMUM_HABANA}: optimum/habana/transformers/models/blip/modeling_blip.py"
    ),
    "habana_frameworks.torch.hpu.reset_peak_memory_stats": (
        "Habana's PyTorch memory API, which mirrors torch.cuda's; not used by optimum-habana, "
        "so not cross-checked here"
    ),
    "habana_frameworks.torch.hpex.optimizers.FusedAdamW": (
        f"{OPTIMUM_HABANA}: optimum/habana/transformers/trainer.py"
    ),
    "habana_frameworks.torch.hpex.normalization.FusedClipNorm": (
        f"{OPTIMUM_HABANA}: optimum/habana/transformers/trainer.py "
        "(FusedClipNorm(parameters, max_norm), then .clip_norm(parameters))"
    ),
}
