"""A wheel built from the repository works in a fresh virtual environment outside it.

This proves the grammar, the JSON Schema (and later the templates) ship inside the wheel,
and that the console script runs with only the declared dependencies installed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv

import pytest

from helpers import REPO, SPECS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*build, "-w", str(dist), str(REPO)], check=True, capture_output=True, text=True)
    (wheel,) = dist.glob("benchc-*.whl")
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    pip = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr
    return root, env_dir


def test_wheel_contains_grammar_schema_and_package(installed):
    root, _ = installed
    import zipfile

    (wheel,) = (root / "dist").glob("benchc-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "benchc/grammar/bench.lark" in names
    assert "benchc/validate/bench.schema.json" in names
    assert "benchc/schemas/metrics.schema.json" in names
    assert {"benchc/templates/program.py.j2", "benchc/templates/launch.sh.j2"} <= names
    modules = {
        "/".join(("benchc", *path.relative_to(REPO / "compiler").parts))
        for path in (REPO / "compiler").rglob("*.py")
    }
    assert modules <= names, sorted(modules - names)


def test_installed_benchc_checks_a_spec_copied_elsewhere(installed):
    root, env_dir = installed
    elsewhere = root / "elsewhere"
    shutil.copytree(SPECS, elsewhere / "specs")
    benchc = env_dir / "bin" / "benchc"
    ok = subprocess.run([str(benchc), "check", "specs/sd3.bench", "specs/beluga-train.bench"],
                        cwd=elsewhere, capture_output=True, text=True)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "ok: specs/sd3.bench" in ok.stdout
    bad = subprocess.run(
        [str(benchc), "check", "missing.bench"], cwd=elsewhere, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    # nothing is read from the source tree: the installed package is the one that ran
    where = subprocess.run([str(env_dir / "bin" / "python"), "-c", "import benchc; print(benchc.__file__)"],
                           cwd=elsewhere, capture_output=True, text=True)  # fmt: skip
    assert str(env_dir) in where.stdout


def test_installed_benchc_compiles_without_torch(installed):
    """The fresh venv has only benchc's own dependencies: no torch, yet compile works."""
    root, env_dir = installed
    elsewhere = root / "compile-here"
    shutil.copytree(SPECS, elsewhere / "specs")
    python = str(env_dir / "bin" / "python")
    has_torch = subprocess.run([python, "-c", "import torch"], capture_output=True)
    assert has_torch.returncode != 0
    done = subprocess.run([str(env_dir / "bin" / "benchc"), "compile", "specs/sd3.bench", "-o", "out"],
                          cwd=elsewhere, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (elsewhere / "out/sd3_mmdit_train/gaudi2/batch-16/bench.py").exists()


def test_installed_benchc_counts_presets_without_torch_and_says_what_a_custom_model_needs(installed):
    """A causal LM preset is counted from the table benchc ships (no torch needed); a shape of
    the user's own needs the model built on the meta device: without transformers, check says
    so at the model block (exit 2), never a traceback."""
    root, env_dir = installed
    here = root / "causal"
    shutil.copytree(SPECS, here / "specs")
    benchc = str(env_dir / "bin" / "benchc")
    done = subprocess.run([benchc, "compile", "specs/mixtral-infer.bench", "-o", "out"], cwd=here,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    own = ('experiment own {\n  model causal_lm { model_type = "qwen2"; hidden = 64; layers = 2; '
           "heads = 4; intermediate = 96 }\n  infer { batch = 1 }\n  targets = [h100]\n}\n")  # fmt: skip
    (here / "own.bench").write_text(own)
    refused = subprocess.run([benchc, "check", "own.bench"], cwd=here, capture_output=True, text=True)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "own.bench:2:9:" in refused.stderr and "needs transformers and torch" in refused.stderr
    assert "pip install 'benchc[run]'" in refused.stderr
