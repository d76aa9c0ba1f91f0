"""Layer 1 of validation: the shipped JSON Schema, with every schema error mapped to a user span."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from importlib import resources

import jsonschema
from jsonschema.exceptions import ValidationError, best_match

from ..diagnostics import Diagnostic, Span, choices_hint

_TYPE_WORDS = {
    "integer": "a whole number",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "array": "a list",
    "object": "a block",
}


@lru_cache(maxsize=1)
def schema() -> dict:
    text = resources.files("benchc.validate").joinpath("bench.schema.json").read_text("utf-8")
    return json.loads(text)


def _identity(value: object) -> object:
    """A hashable key equal for values JSON Schema calls equal (1 and 1.0; not true and 1)."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, list):
        return ("list", tuple(_identity(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, _identity(item)) for key, item in value.items()))
    return ("string", value)


def _unique_items(validator, unique, instance, schema):
    """uniqueItems in linear time: jsonschema's own compares every pair of a list it cannot
    sort (numbers mixed with names): 9,000 such targets took 14 s."""
    if unique and validator.is_type(instance, "array"):
        keys = [_identity(item) for item in instance]
        if len(set(keys)) != len(keys):
            yield ValidationError(f"{instance!r} has non-unique elements")


@lru_cache(maxsize=2)
def _validator(whole: bool = True) -> jsonschema.Draft202012Validator:
    """The schema's validator; `whole=False`: for some top-level sections of the settings (the
    top level's required keys not asked for)."""
    checker = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"uniqueItems": _unique_items})
    root = schema() if whole else {k: v for k, v in schema().items() if k != "required"}
    return checker(root)


def setting_names(path: tuple[str, ...]) -> list[str] | None:
    """The keys the schema allows after `path` (e.g. ("train",) -> batch, steps, ...).

    None when `path` itself is not a settings block the schema knows.
    """
    node = schema()
    for part in path:
        node = _deref(node)
        properties = node.get("properties", {})
        if part not in properties:
            return None
        node = properties[part]
    node = _deref(node)
    return sorted(node.get("properties", {})) if node.get("type") == "object" else []


def _deref(node: dict) -> dict:
    while "$ref" in node:
        node = schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def describe(value: object) -> str:
    """A value as the user wrote it, for messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        if set(value) == {"fn", "args"}:
            return f"{value['fn']}(...)"
        return "a block"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a name or string"
    if isinstance(value, list):
        return "a list"
    return "a block"


def dotted(path) -> str:
    """('train', 'optimizer', 'args', 'lr') -> 'train.optimizer(lr)'; list indices as [i]."""
    text = ""
    parts = list(path)
    i = 0
    while i < len(parts):
        part = parts[i]
        if part == "args" and i > 0:
            rest = parts[i + 1 :]
            return text + (f"({rest[0]})" if rest else "(...)")
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
        i += 1
    return text or "experiment"


def validate_settings(
    values: dict, span_of: Callable[[tuple, bool], Span], checked: dict | None = None
) -> list[Diagnostic]:
    """All schema errors in `values`, each located with `span_of(path, prefer_key)`.
    `checked`: settings already found valid (the document a variant was made from); a
    top-level section equal to its counterpart there is not validated again."""
    if checked is None:
        instance, validator = values, _validator()
    else:
        instance = {k: v for k, v in values.items() if k not in checked or checked[k] != v}
        validator = _validator(whole=False)
    diagnostics = []
    for err in validator.iter_errors(instance):
        diagnostics.extend(_diagnose(_deepest(err), span_of))
    return sorted(diagnostics, key=_position)


def _position(diagnostic: Diagnostic) -> tuple:
    span = diagnostic.span
    return (span.source.name, span.line, span.column) if span else ("", 0, 0)


def _deepest(err: ValidationError) -> ValidationError:
    """For anyOf/oneOf, the branch error that best explains the mistake."""
    while err.validator in ("anyOf", "oneOf") and err.context:
        instance = err.instance
        # Prefer branches of the value's own kind: a misspelt name vs. a call with a bad argument.
        same_kind = [
            e for e in err.context
            if (isinstance(instance, dict)) == (e.validator not in ("enum", "const"))
        ]  # fmt: skip
        # Else a branch that took the value's type and failed on its content (a pattern).
        content = [e for e in err.context if e.validator != "type"]
        err = best_match(same_kind or content or err.context)
    return err


def _model_setting_hint(key: str, written: list[str], kinds: list[str]) -> str | None:
    """`model.depth = 3`: the setting of a model kind, written without the kind."""
    owners = [kind for kind in (written or kinds) if key in (setting_names(("model", kind)) or [])]
    if not owners:
        return None
    return "model settings go under the model kind: " + " or ".join(f"model.{k}.{key}" for k in owners)


def _diagnose(err: ValidationError, span_of) -> list[Diagnostic]:
    path = tuple(err.absolute_path)
    where = dotted(path)
    value = err.instance
    kind = err.validator
    if kind == "additionalProperties":
        known = sorted(err.schema.get("properties", {}))
        extra = [key for key in value if key not in known]
        if path and path[-1] == "args":
            return [
                Diagnostic(
                    f"unknown argument '{key}' to {dotted(path[:-1])}",
                    span_of(path + (key,), True),
                    hint=choices_hint(key, known, "arguments"),
                )
                for key in extra
            ]
        if path == ("model",) or (len(path) == 3 and path[0] == "on" and path[2] == "model"):
            return [
                Diagnostic(
                    f"unknown model kind '{key}'",
                    span_of(path + (key,), True),
                    hint=_model_setting_hint(key, [k for k in value if k in known], known)
                    or choices_hint(key, known, "model kinds"),
                )
                for key in extra
            ]
        inside = f" in {where}" if path else ""
        return [
            Diagnostic(
                f"unknown key '{key}'{inside}",
                span_of(path + (key,), True),
                hint=choices_hint(key, known, "known keys" + inside),
            )
            for key in extra
        ]
    if kind == "required":
        missing = [key for key in err.validator_value if key not in value]
        what = "the experiment" if not path else where
        examples = {
            "model": 'model mmdit { preset = "sd3-medium" }',
            "targets": "targets = [gaudi2, h100]",
        }
        return [
            Diagnostic(
                f"{what} is missing '{key}'",
                span_of(path, True),
                hint=f"add {examples[key]}" if key in examples else f"add {key} = ...",
            )
            for key in missing
        ]
    span = span_of(path, False)
    if kind == "enum":
        return [
            Diagnostic(
                f"{describe(value)} is not a valid {where.split('.')[-1].split('(')[-1].rstrip(')')}"
                f" (in {where})",
                span,
                hint=choices_hint(str(value), map(str, err.validator_value), "choices"),
            )
        ]
    if kind == "const":
        return [Diagnostic(f"{where} must be {describe(err.validator_value)}", span)]
    if kind == "type":
        expected = err.validator_value
        expected = expected if isinstance(expected, list) else [expected]
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in expected)
        return [Diagnostic(f"{where} must be {words}, not {_kind(value)} ({describe(value)})", span)]
    if kind in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        relation = {
            "minimum": "at least",
            "exclusiveMinimum": "greater than",
            "maximum": "at most",
            "exclusiveMaximum": "less than",
        }[kind]
        return [
            Diagnostic(
                f"{where} must be {relation} {describe(err.validator_value)}, not {describe(value)}",
                span,
            )
        ]
    if kind in ("minItems", "maxItems"):
        relation = "at least" if kind == "minItems" else "at most"
        return [
            Diagnostic(
                f"{where} must have {relation} {err.validator_value} "
                f"item{'s' if err.validator_value != 1 else ''}, not {len(value)}",
                span,
            )
        ]
    if kind == "uniqueItems":
        seen, repeat = set(), None
        for index, item in enumerate(value):
            marker = json.dumps(item, sort_keys=True)
            if marker in seen:
                repeat = index
                break
            seen.add(marker)
        return [
            Diagnostic(
                f"{describe(value[repeat]) if repeat is not None else 'a value'} appears twice in {where}",
                span_of(path + (repeat,), False) if repeat is not None else span,
            )
        ]
    if kind == "maxProperties" and path[-1:] == ("model",):
        kinds = list(value)
        return [
            Diagnostic(
                f"more than one model kind: {', '.join(kinds)}",
                span_of(path + (kinds[1],), True),
                hint="an experiment benchmarks one model; write one `model KIND { ... }` block",
            )
        ]
    if kind == "minProperties" and path[-1:] == ("model",):
        return [
            Diagnostic(
                "the model block names no model kind",
                span,
                hint='write e.g. model mmdit { preset = "sd3-medium" } '
                "(kinds: causal_lm, llama, mmdit, sd3, flux)",
            )
        ]
    if kind == "minLength":
        return [Diagnostic(f"{where} must not be empty", span)]
    if kind == "maxLength":
        return [Diagnostic(f"{where} is longer than {err.validator_value} characters", span)]
    if kind == "pattern":  # the schema's description says what the pattern admits
        words = err.schema.get("description", "a value of the documented form")
        return [Diagnostic(f"{describe(value)} is not a valid {where}", span, hint=f"{where}: {words}")]
    return [Diagnostic(f"{where}: {err.message}", span)]
