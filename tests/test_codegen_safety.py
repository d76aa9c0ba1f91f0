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
  model mmdit {{ depth = 2; weights = {text} }}
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


def _program(tmp_path, text: str, target: str) -> str:
    path = tmp_path / "safety.bench"
    path.write_text(SPEC.format(text=json.dumps(text), target=target))
    (plan,) = plan_spec(path).plans
    return render_point(plan)["bench.py"]


@pytest.mark.parametrize("target", ["cpu", "h100", "gaudi2"])
@pytest.mark.parametrize("text", NASTY)
def test_spec_strings_arrive_as_constants(tmp_path, text, target):
    program = _program(tmp_path, text, target)
    harmless = _program(tmp_path, "harmless", target)
    assert _structure(program) == _structure(harmless)
    constants = [n.value for n in ast.walk(ast.parse(program)) if isinstance(n, ast.Constant)]
    assert constants.count(text) == 2  # description and weights, each exactly once


def test_launcher_and_manifest_carry_no_spec_strings_unquoted(tmp_path):
    path = tmp_path / "safety.bench"
    text = "$(touch /tmp/pwned) `id` ; rm -rf /"
    path.write_text(SPEC.format(text=json.dumps(text), target="cpu"))
    (plan,) = plan_spec(path).plans
    files = render_point(plan)
    assert "touch" not in files["launch.sh"]
    assert json.loads(files["manifest.json"])["plan"]["description"] == text
