"""What a transformers causal LM holds, counted from the model itself: the `Census` of a config.

One job: answer `census_of(config)` without importing torch in this process. The answer comes,
in this order, from the table shipped for the presets (catalog/causal_lm_census.json, checked
against a fresh count by tests/test_causal_lm.py), from benchc's cache (cache.py, keyed by the
config and the transformers version), or from a child process (plan/census_probe.py, one
for all of a command's counts) that builds the model on the meta device and counts its
weight matrices and embedding. So a new
family needs no arithmetic of its own, and a preset is counted without torch installed.

plan/census_table.py writes the shipped table (`python -m benchc.plan.census_table`).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
from functools import lru_cache
from importlib import metadata, resources

from .. import cache
from ..diagnostics import BenchError, Diagnostic
from ..records import frozen

PROBE_TIMEOUT_S = 300  # a 100k-module MoE takes seconds; an import of torch on a loaded machine, more
TABLE = "causal_lm_census.json"
FLUX_TABLE = "flux_census.json"


class CensusError(Exception):
    """The model could not be counted: transformers refused the config, or is not installed."""


class CensusUnavailable(CensusError):
    """transformers (and torch) are not installed here: nothing can be built to count."""


@frozen
class Census:
    model_class: str  # transformers' class, e.g. MixtralForCausalLM
    layer_class: str  # the decoder layer (FSDP2 and ZeRO-3 wrap it)
    params: int  # every parameter, a tied matrix once
    embedding: int  # the input embedding's elements (a lookup, no FLOPs)
    head: int  # the output head's weight elements (vocab x hidden), tied or not
    tied: bool
    dense_matmul: int  # weight matrices every token multiplies through in the layers
    expert_matmul: int  # weight matrices of every expert of every layer
    experts: int  # experts per MoE layer, 0 for a dense model
    experts_per_token: int
    layers: int
    hidden: int
    vocab: int
    head_dim: int
    q_width: int  # query heads x head_dim
    kv_width: int  # key/value heads x head_dim
    windows: tuple  # per layer: the sliding window, None for full attention
    largest_layer: int  # parameters of the largest decoder layer
    largest_param: int  # elements of the largest parameter
    tp_plan: bool  # the config carries transformers' base_model_tp_plan
    no_split_modules: tuple[str, ...]
    resolved: tuple  # (config key, value) of the built config, for every key a setting maps to

    def value(self, key: str):
        return dict(self.resolved).get(key)

    @property
    def active_matmul(self) -> float:
        """Layer matmul weights one token multiplies through: the dense ones and the experts
        it is routed to (experts_per_token of experts)."""
        if not self.experts:
            return float(self.dense_matmul)
        return self.dense_matmul + self.expert_matmul * self.experts_per_token / self.experts

    @property
    def active_params(self) -> int:
        """Parameters one token uses: all but the experts it is not routed to."""
        if not self.experts:
            return self.params
        idle = self.expert_matmul * (self.experts - self.experts_per_token) // self.experts
        return self.params - idle


@frozen
class FluxCensus:
    """What a Flux transformer holds (plan/census_flux.py): its weight matrices by the rows
    each multiplies (image tokens, text tokens, both, or one row per sample), its blocks."""

    params: int
    image_matmul: int  # the double-stream blocks' image side, the image embedder and projection
    text_matmul: int  # the double-stream blocks' text side and the context embedder
    joint_matmul: int  # the single-stream blocks: every token, image and text
    sample_matmul: int  # the modulations and the timestep/guidance/pooled embedders: a row each
    double_layers: int
    single_layers: int
    inner: int  # heads x head_dim: the attention's width
    double_block: int  # parameters of one double-stream block
    single_block: int  # of one single-stream block
    root: int  # of everything outside the blocks
    largest_param: int
    block_classes: tuple[str, ...]

    def forward_flops(self, image: int, text: int) -> float:
        """One sample's forward: 2 FLOPs per weight per row it multiplies, and each block's
        attention over every token (q.k and the weighted sum: 4 x tokens^2 x inner)."""
        tokens = image + text
        matmul = image * self.image_matmul + text * self.text_matmul + tokens * self.joint_matmul
        attention = 4.0 * tokens**2 * self.inner * (self.double_layers + self.single_layers)
        return 2.0 * (matmul + self.sample_matmul) + attention


def _from_json(data: dict) -> Census:
    values = dict(data)
    values["windows"] = tuple(values["windows"])
    values["no_split_modules"] = tuple(values["no_split_modules"])
    values["resolved"] = tuple(sorted(values["resolved"].items()))
    return Census(**values)


def canonical(config: dict) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=2)
def _table(name: str) -> dict[str, dict]:
    """A presets' census table shipped with benchc: canonical config -> census."""
    return json.loads(resources.files("benchc.catalog").joinpath(name).read_text(encoding="utf-8"))


def _shipped() -> dict[str, dict]:
    return _table(TABLE)


def _shipped_flux() -> dict[str, dict]:
    return _table(FLUX_TABLE)


def _version(library: str) -> str | None:
    try:
        return metadata.version(library)
    except metadata.PackageNotFoundError:
        return None


def _counted(text: str, table: str, library: str, noun: str, request: dict, build):
    """A census, built by `build` from its JSON: from the shipped table, else benchc's cache
    (keyed by the config and the library's version), else counted now by the child process."""
    shipped = _table(table).get(text)
    if shipped is not None:
        return build(shipped)
    version = _version(library)
    if version is None:
        raise CensusUnavailable(
            f"benchc counts a {noun} that is not a preset by building it on the meta device, "
            f"which needs {library} and torch: install benchc's run extra"
        )
    name = f"{table.removesuffix('.json')}-{cache.key(text, version)}.json"
    stored = cache.read_bytes(name)
    if stored is not None:
        try:
            return build(json.loads(stored))
        except (ValueError, TypeError, KeyError):
            pass  # a damaged entry: count again
    answer = _run_probe(request)
    if "error" in answer:
        raise CensusError(f"{library} refuses the {noun}'s config: {answer['error']}")
    cache.write_bytes(name, json.dumps(answer, sort_keys=True).encode())
    return build(answer)


@lru_cache(maxsize=256)
def _census_of(text: str) -> Census:
    return _counted(text, TABLE, "transformers", "model", {"config": json.loads(text)}, _from_json)


def count_afresh(configs: list[dict]) -> list[dict]:
    """Each config counted now, in one child process (no table, no cache): what the presets'
    table is written from and checked against."""
    return _run_probe({"configs": configs})


def count_flux_afresh(configs: list[dict]) -> list[dict]:
    """Each Flux transformer counted now (no table, no cache)."""
    return [_run_probe({"flux": config}) for config in configs]


class _Prober:
    """One child process (census_probe.py) for all of this process's counts: torch and
    transformers are imported once (seconds), each count then takes milliseconds. It reads one
    request a line until its stdin closes, so it ends with this process however that ends
    (atexit closes it; after a kill, the closed pipe does)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.errors = None
        self.lock = threading.Lock()

    def ask(self, request: dict):
        with self.lock:
            if self.process is None or self.process.poll() is not None:
                self._start()
            try:
                self.process.stdin.write(json.dumps(request) + "\n")
                self.process.stdin.flush()
                ready, _, _ = select.select([self.process.stdout], [], [], PROBE_TIMEOUT_S)
                line = self.process.stdout.readline() if ready else None
            except OSError:
                line = ""
            if line is None:
                self.close()
                raise CensusError(f"counting the model on the meta device took over {PROBE_TIMEOUT_S} s")
            if not line.strip():
                self.close()
                self.errors.seek(0)
                last = (self.errors.read().decode(errors="replace").strip().splitlines() or ["no output"])[-1]
                raise CensusError(f"counting the model on the meta device failed: {last}")
            return json.loads(line)

    def _start(self) -> None:
        environment = {**os.environ, "PYTHONWARNINGS": "ignore", "TRANSFORMERS_VERBOSITY": "error"}
        self.errors = tempfile.TemporaryFile()
        self.process = subprocess.Popen([sys.executable, "-m", "benchc.plan.census_probe"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
                                        text=True, env=environment)  # fmt: skip
        atexit.register(self.close)

    def close(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        try:
            process.stdin.close()
            process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()


_PROBER = _Prober()


def _run_probe(request: dict):
    return _PROBER.ask(request)


def checkpoint_tensors(config: dict) -> dict[str, tuple]:
    """The tensors a checkpoint of this config holds, as save_pretrained writes them (name ->
    shape), from the model built on the meta device; cached as the census is."""
    request = {"config": json.loads(canonical(config)), "tensors": True}
    return _tensors(config, "transformers", "tensors", request)


def _tensors(config: dict, library: str, prefix: str, request: dict) -> dict[str, tuple]:
    """The probe's answer to a tensors request for this config, from benchc's cache (keyed by
    the config and the library's version) or counted now and cached."""
    text = canonical(config)
    version = _version(library)
    if version is None:
        raise CensusUnavailable(
            "benchc compares a weights folder with the model its config builds, on the meta device, "
            f"which needs {library} and torch: install the run extra"
        )
    name = f"{prefix}-{cache.key(text, version)}.json"
    stored = cache.read_bytes(name)
    answer = None
    if stored is not None:
        try:
            answer = json.loads(stored)
        except ValueError:
            answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("tensors"), dict):
        answer = _run_probe(request)
        if "error" in answer:
            raise CensusError(f"{library} refuses the checkpoint's config: {answer['error']}")
        cache.write_bytes(name, json.dumps(answer, sort_keys=True).encode())
    return {tensor: tuple(shape) for tensor, shape in answer["tensors"].items()}


def _flux_from_json(data: dict) -> FluxCensus:
    return FluxCensus(**{**data, "block_classes": tuple(data["block_classes"])})


@lru_cache(maxsize=64)
def _flux_census_of(text: str) -> FluxCensus:
    request = {"flux": json.loads(text)}
    return _counted(text, FLUX_TABLE, "diffusers", "Flux transformer", request, _flux_from_json)


def flux_checkpoint_tensors(config: dict) -> dict[str, tuple]:
    """The tensors a Flux transformer checkpoint of this config holds (name -> shape), from
    the model built on the meta device; cached as the census is."""
    return _tensors(config, "diffusers", "flux-tensors", {"flux": config, "tensors": True})


def flux_census_of(config: dict) -> FluxCensus:
    """The census of a Flux transformer (FluxTransformer2DModel's keyword arguments)."""
    return _flux_census_of(canonical(config))


def counted_or_located(count, config: dict, at, refused_hint: str):
    """count(config), its failure a located error of the spec's model block: how to count it
    (the run extra, or a preset), or what the library refused."""
    try:
        return count(config)
    except CensusUnavailable as exc:
        hint = "pip install 'benchc[run]' (or name a preset: their counts ship with benchc)"
        raise BenchError(Diagnostic(f"model: {exc}", at, hint=hint)) from None
    except CensusError as exc:
        raise BenchError(Diagnostic(f"model: {exc}", at, hint=refused_hint)) from None


def census_of(config: dict) -> Census:
    """The census of a transformers causal LM config (config.json's form, model_type included)."""
    return _census_of(canonical(config))
