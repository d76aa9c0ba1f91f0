"""The grammar and the typed syntax tree: values, statements, comments, spans."""

from __future__ import annotations

import pytest

from benchc.diagnostics import BenchError, Source
from benchc.frontend import syntax as ast
from benchc.frontend.parser import parse_text


def parse(text: str) -> ast.File:
    return parse_text(Source("t.bench", text))


def value_of(text: str):
    statement = parse(f"x = {text}").statements[0]
    assert isinstance(statement, ast.Assignment)
    return statement.value


@pytest.mark.parametrize(
    "text, expected",
    [
        ("16", 16),
        ("1_024", 1024),
        ("-3", -3),
        ("+7", 7),
        ("1e-4", 1e-4),
        ("2.5", 2.5),
        ("6.0E+2", 600.0),
        ("1e3", 1000),
        ("1_000.000_5", 1000.0005),
    ],
)
def test_numbers(text, expected):
    node = value_of(text)
    assert isinstance(node, ast.Number)
    assert node.value == expected
    assert type(node.value) is type(expected)


def test_strings_use_json_escapes():
    node = value_of(r'"a \"quoted\" \\ word\n\u00e9"')
    assert node.value == 'a "quoted" \\ word\né'


def test_booleans_names_lists_and_calls():
    assert value_of("true").value is True
    assert value_of("false").value is False
    name = value_of("bf16")
    assert isinstance(name, ast.Name) and name.value == "bf16"
    items = value_of("[gaudi2, h100,]")
    assert [i.value for i in items.items] == ["gaudi2", "h100"]
    assert value_of("[]").items == ()
    call = value_of("adamw(lr = 1e-4, betas = [0.9, 0.95])")
    assert isinstance(call, ast.Call) and call.name == "adamw"
    assert ast.plain(call) == {"fn": "adamw", "args": {"lr": 1e-4, "betas": [0.9, 0.95]}}
    assert ast.plain(value_of("sgd()")) == {"fn": "sgd", "args": {}}


def test_keywords_are_not_names_but_prefixes_are():
    assert value_of("trueish").value == "trueish"
    assert isinstance(value_of("sweeper"), ast.Name)


def test_statements_comments_and_separators():
    tree = parse(
        """
        # a comment
        // another comment
        include "base.bench"
        experiment demo {
          model mmdit { depth = 2; patch = 2 }   # trailing comment
          train.batch = 4
          reference "gaudi2 b16" { value = 1 }
          sweep train.batch = [4, 8]
        }
        """
    )
    assert len(tree.includes) == 1 and tree.includes[0].path.value == "base.bench"
    (experiment,) = tree.experiments
    assert experiment.name == "demo"
    kinds = [type(e).__name__ for e in experiment.body]
    assert kinds == ["Block", "Assignment", "Block", "Sweep"]
    model, dotted, reference, sweep = experiment.body
    assert (model.name, model.label) == ("model", "mmdit")
    assert dotted.key.parts == ("train", "batch")
    assert reference.label == "gaudi2 b16"
    assert sweep.key.dotted == "train.batch" and len(sweep.values.items) == 2


def test_every_node_carries_its_span():
    tree = parse('experiment e {\n  train { batch = 16 }\n  targets = [h100, "a100"]\n}\n')
    (experiment,) = tree.experiments
    assert (experiment.name_span.line, experiment.name_span.column) == (1, 12)
    train = experiment.body[0]
    assert (train.name_span.line, train.name_span.column) == (2, 3)
    batch = train.body[0]
    assert (batch.key.span.line, batch.key.span.column, batch.key.span.end_column) == (2, 11, 16)
    assert (batch.value.span.column, batch.value.span.end_column) == (19, 21)
    targets = experiment.body[1].value
    spans = [(i.span.line, i.span.column, i.span.end_column) for i in targets.items]
    assert spans == [(3, 14, 18), (3, 20, 26)]


@pytest.mark.parametrize(
    "text, message",
    [
        ('x = "open', "unterminated string"),
        ("x = 3x", "malformed number '3x'"),
        ("x = 1.2.3", "malformed number '1.2.3'"),
        ("x = [1, 2", "this list is not closed"),
        ("x =", "unexpected end of file"),
        ("experiment e { x = }", "unexpected '}'"),
        ("x = @", "unexpected character '@'"),
        ('x = "\\q"', "invalid escape sequence in string"),
        ("x = f(a = 1, a = 2)", "argument 'a' given twice"),
        ("x = 1e999", "number 1e999 is too large"),
    ],
)
def test_syntax_errors_are_located(text, message):
    with pytest.raises(BenchError) as caught:
        parse(text)
    (diagnostic,) = caught.value.diagnostics
    assert diagnostic.message == message
    assert diagnostic.span is not None and diagnostic.span.line == 1


def test_end_of_file_error_points_at_the_block_left_open_or_the_last_line():
    with pytest.raises(BenchError) as caught:
        parse("experiment e {\n  train { batch = 1 }\n\n\n")
    (diagnostic,) = caught.value.diagnostics
    assert (diagnostic.span.line, diagnostic.span.column) == (1, 14)  # the '{' of experiment
    assert "the file ends at line 2" in diagnostic.hint
    with pytest.raises(BenchError) as caught:
        parse("x = 1\ny =\n\n")
    span = caught.value.diagnostics[0].span
    assert (span.line, span.column) == (2, 4)  # nothing left open: just after the last character


def test_excerpts_count_lines_as_the_parser_does():
    source = Source("t.bench", "a = 1\f\r\nb = 2\u2028c\r\nd = 3\n")
    assert source.line_text(2) == "b = 2\u2028c" and source.line_text(3) == "d = 3"
