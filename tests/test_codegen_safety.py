"""A string from a spec can never become code: it reaches the program as one constant.

Specs whose strings hold quotes, newlines, triple quotes, Jinja syntax and Python code are
compiled; the program's syntax tree must be the same as for a harmless string, and the
string must arrive intact as a constant.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from checkpoint_helpers import mmdit_checkpoint

from benchc.codegen.points import render_point
from benchc.pipeline import plan_spec

NASTY = [
    'a "quoted" word',
    "it's",
    "both ' and \"",
    "line one\nline two",
    'triple """ quotes',
    "triple ''' quotes",
    "{{ PLAN }} and {% raw %}",
    "__import__('os').system('touch /tmp/pwned')",
    '"); import os; os.system("x"); ("',
    "back\\slash\\",
    "# not a comment",
    "\u202e right-to-left override",
]

SPEC = """
experiment safety {{
  description = {text}
  model mmdit {{ depth = 2; weights = {weights} }}
  train {{ batch = 4 }}
  targets = [{target}]
}}
"""


class _Blank(ast.NodeTransformer):
    """Replace every string constant, so two trees compare by structure only."""

    def visit_Constant(self, node):
        return ast.Constant("") if isinstance(node.value, str) else node


def _structure(program: str) -> str:
    return ast.dump(_Blank().visit(ast.parse(program)))


def _control(text: str) -> bool:
    """A control character: check refuses it in a weights path (a path holds none)."""
    return any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A real weights folder (check reads it), copied under each nasty name."""
    return mmdit_checkpoint(tmp_path_factory.mktemp("weights") / "mmdit", num_layers=2)


def _weights_folder(tmp_path: Path, checkpoint: Path, name: str) -> Path:
    folder = tmp_path / "w" / name
    if not folder.exists():
        shutil.copytree(checkpoint, folder)
    return folder.resolve()


def _program(tmp_path, checkpoint, text: str, target: str) -> tuple[str, str]:
    path = tmp_path / "safety.bench"
    name = "harmless" if _control(text) else text
    weights = str(_weights_folder(tmp_path, checkpoint, name))
    path.write_text(SPEC.format(text=json.dumps(text), weights=json.dumps(weights), target=target))
    (plan,) = plan_spec(path).plans
    return render_point(plan)["bench.py"], weights


@pytest.mark.parametrize("target", ["cpu", "h100", "gaudi2"])
@pytest.mark.parametrize("text", NASTY)
def test_spec_strings_arrive_as_constants(tmp_path, checkpoint, text, target):
    program, weights = _program(tmp_path, checkpoint, text, target)
    harmless, _ = _program(tmp_path, checkpoint, "harmless", target)
    assert _structure(program) == _structure(harmless)
    constants = [n.value for n in ast.walk(ast.parse(program)) if isinstance(n, ast.Constant)]
    # the description once; the weights path (a folder named by the text, absolute) as the
    # model's weights and as the checkpoint the program checks (a path with a newline is refused)
    assert constants.count(text) == 1
    assert constants.count(weights) == 2


def test_launcher_and_manifest_carry_no_spec_strings_unquoted(tmp_path, checkpoint):
    path = tmp_path / "safety.bench"
    text = "$(touch /tmp/pwned) `id` ; rm -rf /"
    weights = str(_weights_folder(tmp_path, checkpoint, text))
    path.write_text(SPEC.format(text=json.dumps(text), weights=json.dumps(weights), target="cpu"))
    (plan,) = plan_spec(path).plans
    files = render_point(plan, sbatch=True)
    assert "touch" not in files["launch.sh"] and "touch" not in files["job.sbatch"]
    assert json.loads(files["manifest.json"])["plan"]["description"] == text


SWEPT = """
experiment safety {{
  model mmdit {{ depth = 2 }}
  train {{ batch = 4 }}
  cluster {{ nodes = 2 }}
  targets = [{target}]
  sweep model.mmdit.weights = [{values}]
}}
"""


@pytest.mark.integration
@pytest.mark.parametrize("target", ["cpu", "h100", "gaudi2"])
def test_point_names_from_string_sweeps_reach_shell_files_as_safe_words(tmp_path, checkpoint, target):
    """A swept string names the point, which the shell files print (a comment, the job name,
    the rendezvous id): it arrives sanitised, and each file still parses."""
    import subprocess

    nasty = ["$(touch /tmp/pwned)", "a'b\"c", "`id`; rm -rf /", "x y"]  # a newline: refused
    for value in nasty:  # relative: read from the spec's folder
        shutil.copytree(checkpoint, tmp_path / value, dirs_exist_ok=True)
    path = tmp_path / "swept.bench"
    path.write_text(SWEPT.format(target=target, values=", ".join(json.dumps(v) for v in nasty)))
    plans = plan_spec(path).plans
    assert len(plans) == len(nasty)
    for plan in plans:
        files = render_point(plan, sbatch=True)
        for name in ("launch.sh", "job.sbatch"):
            text = files[name]
            assert "$(touch" not in text and "`id`" not in text and "; rm -rf" not in text
            assert "a'b" not in text and "x y" not in text
            shell = tmp_path / name
            shell.write_text(text)
            assert subprocess.run(["bash", "-n", str(shell)], capture_output=True).returncode == 0
