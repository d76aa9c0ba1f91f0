"""A string from a spec can never become code: it reaches the program as one constant.

Specs whose strings hold quotes, newlines, triple quotes, Jinja syntax and Python code are
compiled; the program's syntax tree must be the same as for a harmless string, and the
string must arrive intact as a constant.
"""

from __future__ import annotations

import ast
import json

import pytest

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


def _program(tmp_path, text: str, target: str) -> str:
    path = tmp_path / "safety.bench"
    weights = "harmless" if _control(text) else text
    path.write_text(SPEC.format(text=json.dumps(text), weights=json.dumps(weights), target=target))
    (plan,) = plan_spec(path).plans
    return render_point(plan)["bench.py"]


@pytest.mark.parametrize("target", ["cpu", "h100", "gaudi2"])
@pytest.mark.parametrize("text", NASTY)
def test_spec_strings_arrive_as_constants(tmp_path, text, target):
    program = _program(tmp_path, text, target)
    harmless = _program(tmp_path, "harmless", target)
    assert _structure(program) == _structure(harmless)
    constants = [n.value for n in ast.walk(ast.parse(program)) if isinstance(n, ast.Constant)]
    # description and weights, each exactly once (a weights path with a newline is refused)
    assert constants.count(text) == (1 if _control(text) else 2)


def test_launcher_and_manifest_carry_no_spec_strings_unquoted(tmp_path):
    path = tmp_path / "safety.bench"
    text = "$(touch /tmp/pwned) `id` ; rm -rf /"
    path.write_text(SPEC.format(text=json.dumps(text), weights=json.dumps(text), target="cpu"))
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


@pytest.mark.parametrize("target", ["cpu", "h100", "gaudi2"])
def test_point_names_from_string_sweeps_reach_shell_files_as_safe_words(tmp_path, target):
    """A swept string names the point, which the shell files print (a comment, the job name,
    the rendezvous id): it arrives sanitised, and each file still parses."""
    import subprocess

    nasty = ["$(touch /tmp/pwned)", "a'b\"c", "`id`; rm -rf /", "x y"]  # a newline: refused
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
