"""The library set generated programs are checked with, and how, per target family. The
versions are constraints.txt's, which CI and the README's commands install (a test holds the
two equal); each build's manifest names them under `checked_with`."""

from __future__ import annotations

TESTED = {
    "torch": "2.13.0",
    "diffusers": "0.35.1",
    "transformers": "4.55.4",
    "accelerate": "1.10.1",
    "tokenizers": "0.21.4",
    "deepspeed": "0.19.8",
    "optimum-habana": "1.21.2",
}
HOW = {
    "cpu": "run on the CPU in CI with these versions; also smoke-run with the newest versions "
    "the run extra allows",
    "cuda": "checked statically in CI against these versions' signatures; not run on a GPU",
    "hpu": "checked statically in CI against these versions and optimum-habana's source "
    "(habana_frameworks held to an allow-list of names); not run on Gaudi",
}


def checked_with(family: str) -> dict:
    return {"how": HOW[family], "libraries": dict(TESTED)}
