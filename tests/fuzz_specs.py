"""Hypothesis strategies for fuzzing benchc: valid `.bench` specs built from the language, and
mutations of them and of the reference specs (tests/test_fuzz.py states the properties).

A generated input is a `Case`: the bytes of a spec file, the bytes of the file the reference
specs include (common/sd3-mmdit-train.bench, possibly mangled too), and the options of the
front end (`--set`, `--target`, `--smoke`). Valid specs follow docs/language.md: each model
kind with its workload, every settings block, `on TARGET`, `reference`, sweeps, dotted keys,
`;` separators, comments and trailing commas. Mutations are the edits a hand, a generator or a
broken transfer makes: deleted, duplicated and swapped lines and tokens, deleted and replaced
characters (typos), random bytes and unicode, deep nesting, huge numbers, very long lines and
names, CRLF, a BOM, NUL bytes.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from hypothesis import strategies as st

from helpers import SPECS

FRAGMENT_NAME = "common/sd3-mmdit-train.bench"  # what sd3.bench and sd3-scale.bench include
FRAGMENT = (SPECS / FRAGMENT_NAME).read_bytes()
BASE_NAME, BASE = "base.bench", b"train { batch = 2 }\n"  # a second includable file
REFERENCE_SPECS = {path.name: path.read_bytes() for path in sorted(SPECS.glob("*.bench"))}
INCLUDING_SPECS = [text for text in REFERENCE_SPECS.values() if FRAGMENT_NAME.encode() in text]

TARGETS = ("cpu", "gaudi2", "gaudi3", "a100", "h100", "h200")
BOM = "\ufeff".encode()


def _compact(data: bytes) -> str:
    """A Python expression for `data` that stays short when it holds long runs (100,000 '['):
    what a failing example prints, and what can be pasted back into an @example."""
    parts, literal = [], bytearray()
    for byte, run in itertools.groupby(data):
        count = len(list(run))
        if count >= 32:
            if literal:
                parts.append(repr(bytes(literal)))
                literal.clear()
            parts.append(f"{bytes([byte])!r} * {count}")
        else:
            literal.extend([byte] * count)
    if literal or not parts:
        parts.append(repr(bytes(literal)))
    return " + ".join(parts)


@dataclass(frozen=True)
class Case:
    """One fuzz input: a spec file (and the fragment it may include) plus front-end options."""

    spec: bytes
    fragment: bytes = FRAGMENT
    overrides: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    smoke: bool = False
    notes: tuple[str, ...] = field(default=(), compare=False)  # the mutations applied

    def __repr__(self) -> str:
        fields = [f"spec={_compact(self.spec)}"]
        if self.fragment != FRAGMENT:
            fields.append(f"fragment={_compact(self.fragment)}")
        for name in ("overrides", "targets", "smoke", "notes"):
            value = getattr(self, name)
            if value:
                fields.append(f"{name}={value!r}")
        return f"Case({', '.join(fields)})"


# ---------------------------------------------------------------- valid specs, from the language


@dataclass(frozen=True)
class Assign:
    key: tuple[str, ...]
    value: str  # already written in the language's syntax


@dataclass(frozen=True)
class Block:
    name: str
    label: str | None  # written as it appears: `mmdit` or `"gaudi2 b16"`
    body: tuple


@dataclass(frozen=True)
class Sweep:
    key: tuple[str, ...]
    values: tuple[str, ...]


def integer(draw, low: int, high: int) -> str:
    value = draw(st.integers(low, high))
    if value >= 1000 and draw(st.booleans()):
        return f"{value:_}"  # 1_024
    return str(value)


def choice(draw, *options: str) -> str:
    return draw(st.sampled_from(options))


def string(draw, texts=("x", "run 1", "S1 on 16 devices", "café ☕", "tab\\tnew\\nline", "\\u00e9")) -> str:
    return '"' + draw(st.sampled_from(texts)) + '"'


def a_list(draw, items: list[str]) -> str:
    trailing = "," if items and draw(st.booleans()) else ""
    return "[" + ", ".join(items) + trailing + "]"


def optional(draw, entries: list) -> tuple:
    """A random subset of `entries`, in their order."""
    return tuple(entry for entry in entries if draw(st.booleans()))


def flux_entries(draw) -> tuple:
    if draw(st.integers(0, 3)) == 0:
        return (Assign(("preset",), string(draw, ("flux.1-dev", "flux.1-schnell"))),)
    shape = [Assign(("depth",), integer(draw, 1, 3)), Assign(("single_depth",), integer(draw, 1, 3)),
             Assign(("heads",), choice(draw, "2", "4"))]  # fmt: skip
    extra = optional(draw, [
        Assign(("head_dim",), choice(draw, "32", "64", "48")),
        Assign(("joint_attention_dim",), choice(draw, "64", "4096")),
        Assign(("pooled_projection_dim",), choice(draw, "32", "768")),
        Assign(("guidance",), choice(draw, "true", "false")),
        Assign(("text_tokens",), choice(draw, "16", "512", "600")),
        Assign(("weights",), string(draw, ("/models/flux", "weights"))),
    ])  # fmt: skip
    return tuple(shape) + extra


def model_entries(draw, kind: str) -> tuple:
    if kind == "flux":
        return flux_entries(draw)
    if kind in ("mmdit", "sd3"):
        presets = (
            ("sd3-medium", "mmdit-d24", "sd3-large", "mmdit-d38")
            if kind == "mmdit"
            else ("sd3-medium", "sd3-large")
        )
        if draw(st.integers(0, 3)) == 0:
            shape = [Assign(("preset",), string(draw, presets))]
        else:
            depth = draw(st.integers(1, 4))
            shape = [Assign(("depth",), str(depth))]
            shape += optional(
                draw, [Assign(("heads",), str(depth)), Assign(("head_dim",), choice(draw, "8", "16", "64"))]
            )
        extra = optional(
            draw,
            [
                Assign(("patch",), choice(draw, "1", "2")),
                Assign(("qk_norm",), choice(draw, "none", "rms_norm")),
                Assign(("in_channels",), choice(draw, "4", "16")),
                Assign(("pos_embed_max_size",), choice(draw, "64", "192")),
                Assign(("joint_attention_dim",), choice(draw, "64", "4096")),
                Assign(("pooled_projection_dim",), choice(draw, "64", "2048")),
                Assign(("weights",), string(draw, ("/models/sd3", "weights"))),
            ],
        )
        if kind == "mmdit":
            extra += optional(draw, [Assign(("text_tokens",), choice(draw, "8", "154"))])
        else:
            encoders = draw(st.sampled_from([["clip_l", "clip_g", "t5"], ["clip_l", "clip_g"], ["t5"]]))
            extra += optional(
                draw,
                [
                    Assign(("text_encoders",), a_list(draw, encoders)),
                    Assign(("t5_tokens",), choice(draw, "16", "256")),
                ],
            )
        return tuple(shape) + extra
    if draw(st.integers(0, 3)) == 0:
        return (
            Assign(
                ("preset",), string(draw, ("llama-2-7b", "llama-2-13b", "llama-2-70b", "stable-beluga-2"))
            ),
        )
    heads = draw(st.sampled_from([2, 4, 8]))
    shape = (
        Assign(("hidden",), str(heads * draw(st.sampled_from([8, 16, 32])))),
        Assign(("layers",), integer(draw, 1, 4)),
        Assign(("heads",), str(heads)),
        Assign(("intermediate",), choice(draw, "64", "256", "1_024")),
    )
    return shape + optional(
        draw,
        [
            Assign(("kv_heads",), str(draw(st.sampled_from([h for h in (1, 2, 4, 8) if heads % h == 0])))),
            Assign(("vocab",), choice(draw, "128", "32000")),
            Assign(("max_positions",), choice(draw, "256", "4096")),
            Assign(("weights",), string(draw, ("/models/llama",))),
        ],
    )


def optimizer(draw) -> str:
    name = choice(draw, "adamw", "adam", "sgd")
    if draw(st.booleans()):
        return name
    if name == "sgd":
        args = optional(draw, ["lr = 0.01", "momentum = 0.9", "weight_decay = 0", "nesterov = true"])
    else:
        args = optional(draw, ["lr = 1e-4", "betas = [0.9, 0.95]", "eps = 1e-8", "weight_decay = 0.0"])
    trailing = "," if args and draw(st.booleans()) else ""
    return f"{name}({', '.join(args)}{trailing})"


def precision(draw) -> str:
    return choice(draw, *["bf16"] * 4, "fp32", "fp32", "fp16", "fp8")


def steps_and_warmup(draw, most: int) -> list:
    steps = draw(st.integers(2, most))
    return [Assign(("steps",), str(steps)), Assign(("warmup",), str(draw(st.integers(0, steps - 1))))]


def workload_entries(draw, kind: str, mode: str) -> tuple:
    common = [
        Assign(("precision",), precision(draw)),
        Assign(("attention",), choice(draw, *["sdpa"] * 5, "fused", "fused", "eager", "flash", "xformers")),
        Assign(("batch",), integer(draw, 1, 64)),
        Assign(("compile",), choice(draw, "true", "false")),
        Assign(("seed",), integer(draw, 0, 10_000)),
    ]
    if mode == "train":
        specific = [
            Assign(("grad_accum",), integer(draw, 1, 4)),
            Assign(("optimizer",), optimizer(draw)),
            Assign(("grad_clip",), choice(draw, "1.0", "0.5", "2")),
            Assign(("objective",), "rectified_flow" if kind in ("mmdit", "flux") else "causal_lm"),
        ]
        specific.append(
            Assign(("resolution",), choice(draw, "128", "256", "512"))
            if kind in ("mmdit", "flux")
            else Assign(("seq_len",), choice(draw, "64", "128", "2048"))
        )
        chosen = optional(draw, common + specific)
        return chosen + (tuple(steps_and_warmup(draw, 60)) if draw(st.booleans()) else ())
    specific = [Assign(("graphs",), choice(draw, "true", "false"))]
    if kind in ("sd3", "flux"):
        specific += [
            Assign(("resolution",), choice(draw, "128", "512", "1024")),
            Assign(("denoising_steps",), integer(draw, 1, 30)),
            Assign(("guidance",), choice(draw, "1.0", "7.0", "0", "4.5")),
        ]
    else:
        specific += [
            Assign(("input_tokens",), choice(draw, "8", "128")),
            Assign(("output_tokens",), choice(draw, "8", "128", "2048")),
            Assign(("kv_cache",), choice(draw, "static", "dynamic")),
        ]
    chosen = optional(draw, common + specific)
    return chosen + (tuple(steps_and_warmup(draw, 8)) if draw(st.booleans()) else ())


def settings_blocks(draw, mode: str, kind: str) -> list:
    blocks = []
    few = mode == "infer" or draw(st.booleans())  # inference programs run on one device
    nodes = 1 if few else draw(st.integers(1, 4))
    per_node = 1 if few and draw(st.integers(0, 3)) else draw(st.sampled_from([1, 2, 8]))
    if draw(st.booleans()):
        blocks.append(
            Block(
                "cluster",
                None,
                optional(
                    draw,
                    [
                        Assign(("nodes",), str(nodes)),
                        Assign(("devices_per_node",), str(per_node)),
                    ],
                ),
            )
        )
    if draw(st.booleans()):
        tensor, pipeline = draw(st.sampled_from([1, 1, 1, 2])), draw(st.sampled_from([1, 1, 1, 2]))
        data = max(1, nodes * per_node // (tensor * pipeline))
        parallel = [
            Assign(("data",), str(data)),
            Assign(("tensor",), str(tensor)),
            Assign(("pipeline",), str(pipeline)),
        ]
        if mode == "train":
            parallel += [
                Assign(("sharding",), choice(draw, "none", "zero1", "zero2", "zero3", "fsdp")),
                Assign(("activation_checkpointing",), choice(draw, "true", "false")),
            ]
        blocks.append(Block("parallel", None, optional(draw, parallel)))
    if draw(st.booleans()):
        metrics = {
            ("mmdit", "train"): "images_per_s",
            ("llama", "train"): "tokens_per_s",
            ("sd3", "infer"): "s_per_image",
            ("llama", "infer"): "output_tokens_per_s",
            ("flux", "train"): "images_per_s",
            ("flux", "infer"): "s_per_image",
        }
        metric = metrics[(kind, mode)] if draw(st.integers(0, 4)) else choice(draw, "ttft_s", "tpot_s")
        blocks.append(
            Block(
                "measure",
                None,
                optional(
                    draw,
                    [
                        Assign(("metric",), metric),
                        Assign(("repeat",), integer(draw, 1, 5)),
                        Assign(("timeout",), choice(draw, "60", "3600")),
                    ],
                ),
            )
        )
    if draw(st.integers(0, 3)) == 0:
        blocks.append(
            Block(
                "slurm",
                None,
                optional(
                    draw,
                    [
                        Assign(("partition",), string(draw, ("gpu", "gaudi,gaudi-long"))),
                        Assign(("account",), string(draw, ("proj",))),
                        Assign(("time",), choice(draw, "90", '"01:30:00"', '"1-12"')),
                        Assign(("gres",), string(draw, ("gpu:8", "hpu:8"))),
                        Assign(("exclusive",), choice(draw, "true", "false")),
                        Assign(("job_name",), string(draw, ("job-1",))),
                        Assign(("log",), string(draw, ("slurm-%j.out", "logs/%j.out"))),
                    ],
                ),
            )
        )
    return blocks


def on_blocks(draw, mode: str, targets: list[str]) -> list:
    blocks = []
    for target in draw(st.lists(st.sampled_from(TARGETS), max_size=2, unique=True)):
        body = optional(
            draw,
            [
                Assign((mode, "precision"), precision(draw)),
                Assign((mode, "attention"), choice(draw, "sdpa", "fused")),
                Assign((mode, "batch"), integer(draw, 1, 8)),
            ]
            + ([Assign(("infer", "graphs"), "false")] if mode == "infer" else []),
        )
        blocks.append(Block("on", target, body))
    return blocks


def references(draw, mode: str) -> list:
    blocks = []
    for index in range(draw(st.integers(0, 2))):
        label = choice(draw, f"ref{index}", f'"published {index}"')
        body = [
            Assign(("target",), draw(st.sampled_from(TARGETS))),
            Assign(("value",), choice(draw, "927", "3.2", "1_254")),
            Assign(("unit",), string(draw, ("images/s", "tokens/s", "s/image"))),
        ]
        body += optional(
            draw, [Assign(("source",), string(draw)), Block("where", None, (Assign((mode, "batch"), "16"),))]
        )
        blocks.append(Block("reference", label, tuple(body)))
    return blocks


def sweeps(draw, mode: str) -> list:
    axes = {
        (mode, "batch"): lambda: integer(draw, 1, 64),
        (mode, "seed"): lambda: integer(draw, 0, 99),
        ("cluster", "nodes"): lambda: integer(draw, 1, 4),
        (mode, "precision"): lambda: precision(draw),
        ("train", "optimizer") if mode == "train" else ("infer", "compile"): (
            (lambda: optimizer(draw)) if mode == "train" else (lambda: choice(draw, "true", "false"))
        ),
    }
    keys = draw(st.lists(st.sampled_from(sorted(axes)), max_size=2, unique=True))
    found = []
    for key in keys:
        values = list(dict.fromkeys(axes[key]() for _ in range(draw(st.integers(1, 4)))))
        found.append(Sweep(key, tuple(values)))
    return found


WORKLOADS = (("mmdit", "train"), ("llama", "train"), ("sd3", "infer"), ("llama", "infer"), ("flux", "train"),
             ("flux", "infer"))  # fmt: skip


@st.composite
def spec_texts(draw) -> str:
    """A spec written as docs/language.md describes; most pass `benchc check`, and those that
    fail break a rule between settings (a target's precision, a world size), never the syntax."""
    kind, mode = draw(st.sampled_from(WORKLOADS))
    targets = draw(st.lists(st.sampled_from(TARGETS), min_size=1, max_size=4, unique=True))
    if draw(st.booleans()) and "cpu" not in targets:
        targets[0] = "cpu"  # many plans then hold on the laptop target too
    entries = [
        Block("model", kind, model_entries(draw, kind)),
        Block(mode, None, workload_entries(draw, kind, mode)),
        Assign(("targets",), a_list(draw, targets)),
    ]
    if draw(st.booleans()):
        entries.append(Assign(("description",), string(draw)))
    entries += settings_blocks(draw, mode, kind) + on_blocks(draw, mode, targets) + references(draw, mode)
    entries += sweeps(draw, mode)
    entries = list(draw(st.permutations(entries)))
    name = draw(st.sampled_from(["e", "sd3_mmdit_train", "Bench_2", "_x", "a" * 100]))
    includes = ""
    if kind == "mmdit" and draw(st.integers(0, 2)) == 0:
        includes = f'include "{FRAGMENT_NAME}"\n'
    elif mode == "train" and draw(st.integers(0, 4)) == 0:
        includes = f'include "{BASE_NAME}"\n'
    body = render(draw, entries, "  ")
    newline = "\n" if draw(st.integers(0, 5)) else " "
    return f"{includes}experiment {name} {{{newline}{body}}}\n"


def _flattened(entry, prefix: tuple[str, ...]):
    """`a { b = 1 }` as dotted entries `a.b = 1`, or None where that cannot be written."""
    if isinstance(entry, Assign):
        return [Assign(prefix + entry.key, entry.value)]
    if isinstance(entry, Sweep):
        return [Sweep(prefix + entry.key, entry.values)]
    if entry.label is not None and not re.fullmatch(r"[A-Za-z_]\w*", entry.label):
        return None  # a string label has no dotted form
    if not entry.body:
        return None  # an empty block sets something a dotted key cannot
    inner = prefix + (entry.name,) + ((entry.label,) if entry.label else ())
    flat = []
    for child in entry.body:
        found = _flattened(child, inner)
        if found is None:
            return None
        flat += found
    return flat


def render(draw, entries, indent: str, comments: bool = True) -> str:
    out = []
    for entry in entries:
        if isinstance(entry, Block) and draw(st.integers(0, 3)) == 0:
            flat = _flattened(entry, ())
            if flat is not None:
                out.append(render(draw, flat, indent, comments))
                continue
        if isinstance(entry, Assign):
            spaces = choice(draw, " = ", "=", "  =  ")
            line = f"{indent}{'.'.join(entry.key)}{spaces}{entry.value}"
        elif isinstance(entry, Sweep):
            line = f"{indent}sweep {'.'.join(entry.key)} = {a_list(draw, list(entry.values))}"
        else:
            head = f"{entry.name} {entry.label}" if entry.label else entry.name
            if not entry.body:
                line = f"{indent}{head} {{ }}"
            elif draw(st.booleans()):  # one line, `;` between statements
                inner = render(draw, entry.body, "", comments=False).replace("\n", "; ").rstrip("; ")
                line = f"{indent}{head} {{ {inner} }}"
            else:
                inner = render(draw, entry.body, indent + choice(draw, "  ", "    ", "\t"), comments)
                line = f"{indent}{head} {{\n{inner}{indent}}}"
        if comments and draw(st.integers(0, 7)) == 0:
            line += choice(draw, "   # a comment", '  // another, with { [ " inside')
        out.append(line + "\n")
    return "".join(out)


# ---------------------------------------------------------------- mutations

_TOKEN = re.compile(rb'"(?:[^"\\\n]|\\.)*"|[A-Za-z0-9_.+-]+|[ \t]+|\r?\n|.', re.S)
_NUMBER = re.compile(rb"[+-]?[0-9][0-9_.eE+-]*")
_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
VOCABULARY = [
    b"experiment",
    b"include",
    b"sweep",
    b"true",
    b"false",
    b"model",
    b"mmdit",
    b"llama",
    b"sd3",
    b"train",
    b"infer",
    b"on",
    b"reference",
    b"where",
    b"targets",
    b"cpu",
    b"gaudi2",
    b"h100",
    b"cluster",
    b"parallel",
    b"measure",
    b"slurm",
    b"batch",
    b"nodes",
    b"{",
    b"}",
    b"[",
    b"]",
    b"(",
    b")",
    b"=",
    b",",
    b";",
    b".",
    b'"x"',
    b'""',
    b"16",
    b"0",
    b"-1",
    b"2.5",
    b"1e3",
    b'include "base.bench"',
    b'include "spec.bench"',
    b'include "common/sd3-mmdit-train.bench"',
    b'include "../spec.bench"',
    b'include "/dev/zero"',
    b'include "common"',
    b"adamw(lr = 1e-4)",
    b"sweep train.batch = [1, 2]",
    # keys, values and names of the settings, so that a soup or an edit reaches their rules
    b"e",
    b"steps",
    b"warmup",
    b"preset",
    b"depth",
    b"devices_per_node",
    b"tensor",
    b"data",
    b"target",
    b"value",
    b"unit",
    b"optimizer",
    b"adamw",
    b"lr",
    b"global_batch",
    b"grad_accum",
    b"resolution",
    b"heads",
    b"precision",
    b"bf16",
    b"fp16",
    b"kv_heads",
    b"sharding",
    b"zero3",
    b'"sd3-medium"',
    b'"base.bench"',
    b"\n",
    b"# comment\n",
    b"//",
    b"\\",
]
HUGE_NUMBERS = [
    b"9" * 19,
    b"9223372036854775807",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"1" * 4300,
    b"1" * 4301,
    b"1" * 5000,
    b"1" + b"_0" * 2000,
    b"1e999",
    b"-1e400",
    b"1e-400",
    b"1e308",
    b"1.7976931348623157e308",
    b"0." + b"0" * 5000 + b"1",
    b"1e9223372036854775808",
    b"4.9e-324",
    b"00000000000000000000000016",
    b"1e18",
    b"2e15",
    b"1" + b"0" * 30,
]
NASTY_TEXT = [
    "\ufeff",
    "\x00",
    "\r",
    "\r\n",
    "\t",
    "\x0b",
    "\x0c",
    "\x1b[31m",
    "\u2028",
    "\u2029",
    "\x85",
    "é",
    "ﬁ",
    "٣",
    "𝟙",
    "ß",
    "İ",
    "\u202e",
    "\u200b",
    "\ufffd",
    "\U0001f600",
    "\ud800",
    "\udfff",
    '"\\ud800"',
    '"\\udfff\\ud800"',
    '"\\u0000"',
    '"\\x41"',
    '"\\u12"',
    '"\\',
    '"\n"',
    "𝕖𝕩𝕡𝕖𝕣𝕚𝕞𝕖𝕟𝕥",
]


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate becomes bytes no UTF-8 reader takes


def _tokens(data: bytes) -> list[bytes]:
    return _TOKEN.findall(data)


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _position(draw, data: bytes) -> int:
    return draw(st.integers(0, len(data)))


def _index(draw, items: list) -> int:
    return draw(st.integers(0, max(0, len(items) - 1)))


def delete_line(draw, data):
    lines = _lines(data)
    del lines[_index(draw, lines)]
    return b"\n".join(lines)


def duplicate_line(draw, data):
    lines = _lines(data)
    at = _index(draw, lines)
    lines.insert(_index(draw, lines), lines[at])
    return b"\n".join(lines)


def swap_lines(draw, data):
    lines = _lines(data)
    a, b = _index(draw, lines), _index(draw, lines)
    lines[a], lines[b] = lines[b], lines[a]
    return b"\n".join(lines)


def delete_tokens(draw, data):
    tokens = _tokens(data)
    at = _index(draw, tokens)
    del tokens[at : at + draw(st.integers(1, 3))]
    return b"".join(tokens)


def duplicate_token(draw, data):
    tokens = _tokens(data)
    at = _index(draw, tokens)
    tokens.insert(_index(draw, tokens), tokens[at] if tokens else b"x")
    return b"".join(tokens)


def swap_tokens(draw, data):
    tokens = _tokens(data)
    if not tokens:
        return data
    a, b = _index(draw, tokens), _index(draw, tokens)
    tokens[a], tokens[b] = tokens[b], tokens[a]
    return b"".join(tokens)


def replace_token(draw, data):
    tokens = _tokens(data) or [b""]
    tokens[_index(draw, tokens)] = draw(st.sampled_from(VOCABULARY))
    return b"".join(tokens)


def insert_token(draw, data):
    tokens = _tokens(data)
    tokens.insert(draw(st.integers(0, len(tokens))), b" " + draw(st.sampled_from(VOCABULARY)) + b" ")
    return b"".join(tokens)


def delete_character(draw, data):
    """One byte gone, even inside a word or a number: `experment`, `batc = 2`, `1e` for `1e3`."""
    if not data:
        return data
    at = draw(st.integers(0, len(data) - 1))
    return data[:at] + data[at + 1 :]


EDIT_CHARACTERS = list(b'{}[]()=,;."0123456789abc \n')


def replace_character(draw, data):
    """One byte replaced by punctuation, a digit, a letter or a space: a misspelt key, another
    number, an unbalanced bracket, an unclosed string."""
    if not data:
        return data
    at = draw(st.integers(0, len(data) - 1))
    return data[:at] + bytes([draw(st.sampled_from(EDIT_CHARACTERS))]) + data[at + 1 :]


def insert_bytes(draw, data):
    at = _position(draw, data)
    return data[:at] + draw(st.binary(min_size=1, max_size=12)) + data[at:]


def insert_unicode(draw, data):
    at = _position(draw, data)
    text = draw(
        st.one_of(
            st.sampled_from(NASTY_TEXT), st.text(st.characters(exclude_categories=()), min_size=1, max_size=8)
        )
    )
    return data[:at] + _encode(text) + data[at:]


def deep_nesting(draw, data):
    depth = draw(st.sampled_from([63, 64, 65, 66, 200, 5_000, 100_000]))
    opening = draw(st.sampled_from([b"[", b"{", b"(", b"x {", b"x(a = ", b"[{(", b"on x { "]))
    closing = {
        b"[": b"]",
        b"{": b"}",
        b"(": b")",
        b"x {": b"}",
        b"x(a = ": b")",
        b"[{(": b")}]",
        b"on x { ": b"}",
    }[opening]
    nest = opening * depth + (b"1" if opening.endswith(b"= ") else b"") + closing * depth
    if draw(st.booleans()):
        nest = opening * depth  # left open
    tokens = _tokens(data)
    at = draw(st.integers(0, len(tokens)))
    prefix = b" targets = " if opening in (b"[", b"[{(") and draw(st.booleans()) else b" "
    tokens.insert(at, prefix + nest + b" ")
    return b"".join(tokens)


def huge_number(draw, data):
    tokens = _tokens(data)
    numbers = [i for i, token in enumerate(tokens) if _NUMBER.fullmatch(token)]
    value = draw(st.sampled_from(HUGE_NUMBERS))
    if numbers and draw(st.integers(0, 3)):
        tokens[draw(st.sampled_from(numbers))] = value
        return b"".join(tokens)
    return data.replace(b"{", b"{ train.batch = " + value + b"\n", 1)


def long_text(draw, data):
    length = draw(st.sampled_from([100, 101, 120, 255, 256, 300, 5_000, 100_000]))
    char = draw(st.sampled_from([b"x", b"a_", b"\xc3\xa9", b"1"]))
    long = (char * length)[: max(length, 1)]
    tokens = _tokens(data)
    names = [i for i, token in enumerate(tokens) if _NAME.fullmatch(token)]
    strings = [i for i, token in enumerate(tokens) if token.startswith(b'"')]
    roll = draw(st.integers(0, 3))
    if roll == 0 and names:
        tokens[draw(st.sampled_from(names))] = b"n" + long.replace(b"\xc3\xa9", b"e")
    elif roll == 1 and strings:
        tokens[draw(st.sampled_from(strings))] = b'"' + long + b'"'
    elif roll == 2:
        tokens.insert(draw(st.integers(0, len(tokens))), b" # " + long + b"\n")
    else:
        return data.replace(b"experiment ", b"experiment " + b"e" * length + b"_", 1)
    return b"".join(tokens)


def line_endings(draw, data):
    ending = draw(st.sampled_from([b"\r\n", b"\r", b"\n\r", b"\r\r\n"]))
    return data.replace(b"\n", ending)


def bom(draw, data):
    if draw(st.booleans()):
        return BOM + data
    at = _position(draw, data)
    return data[:at] + BOM + data[at:]


def nul(draw, data):
    at = _position(draw, data)
    return data[:at] + b"\x00" * draw(st.integers(1, 3)) + data[at:]


def truncate(draw, data):
    return data[: _position(draw, data)]


def escape_in_string(draw, data):
    tokens = _tokens(data)
    strings = [i for i, token in enumerate(tokens) if token.startswith(b'"') and token.endswith(b'"')]
    escape = draw(
        st.sampled_from(
            [
                b"\\ud800",
                b"\\udfff",
                b"\\ud800\\udc00",
                b"\\u0000",
                b"\\x41",
                b"\\u12",
                b"\\q",
                b"\\/",
                b"\\u202e",
                b"\\n",
                b"\\\\",
            ]
        )
    )
    if strings:
        at = draw(st.sampled_from(strings))
        tokens[at] = tokens[at][:-1] + escape + b'"'
        return b"".join(tokens)
    return data.replace(b"{", b'{ description = "' + escape + b'"\n', 1)


_LEAVES = [
    "16",
    "0",
    "-1",
    "2.5",
    "1e-4",
    "1_024",
    "true",
    "false",
    '"x"',
    '""',
    '"sd3-medium"',
    "cpu",
    "h100",
    "bf16",
    "adamw",
    "none",
    "static",
]
ARGUMENTS = ["lr", "betas", "eps", "momentum", "nesterov", "weight_decay", "x"]


def _call(parts) -> str:
    name, arguments = parts
    return f"{name}(" + ", ".join(f"{key} = {value}" for key, value in arguments) + ")"


# Any value of the language: numbers, strings, names, booleans, lists and calls, nested.
VALUES = st.recursive(
    st.sampled_from(_LEAVES),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: "[" + ", ".join(items) + "]"),
        st.tuples(
            st.sampled_from(["adamw", "sgd", "adam", "f"]),
            st.lists(st.tuples(st.sampled_from(ARGUMENTS), inner), max_size=3, unique_by=lambda a: a[0]),
        ).map(_call),
    ),
    max_leaves=6,
)
KEYS = [
    "targets",
    "description",
    "model",
    "model.mmdit",
    "model.mmdit.depth",
    "model.sd3.text_encoders",
    "model.llama.kv_heads",
    "train",
    "train.batch",
    "train.optimizer",
    "train.precision",
    "train.steps",
    "infer.batch",
    "infer.graphs",
    "cluster.nodes",
    "cluster.devices_per_node",
    "parallel.tensor",
    "parallel.sharding",
    "measure.metric",
    "measure.repeat",
    "slurm.time",
    "slurm.log",
    "on.cpu.train.batch",
    "reference.r.value",
    "x",
    "train.x.y",
]


def random_value(draw, data):
    """The value after one `=` (or one sweep's list) replaced by any value of the language."""
    tokens = _tokens(data)
    equals = [i for i, token in enumerate(tokens) if token == b"="]
    if not equals:
        return data
    at = draw(st.sampled_from(equals)) + 1
    while at < len(tokens) and tokens[at].isspace():
        at += 1
    value = draw(VALUES).encode()
    if at < len(tokens) and tokens[at] in (b"[", b"("):  # replace the whole list or call
        end, depth = at, 0
        while end < len(tokens):
            depth += tokens[end] in (b"[", b"(")
            depth -= tokens[end] in (b"]", b")")
            end += 1
            if depth <= 0:
                break
        tokens[at:end] = [value]
    else:
        tokens[at : at + 1] = [value]
    return b"".join(tokens)


MUTATIONS = (
    random_value,
    random_value,
    delete_line,
    duplicate_line,
    swap_lines,
    delete_tokens,
    duplicate_token,
    swap_tokens,
    replace_token,
    insert_token,
    delete_character,
    replace_character,
    insert_bytes,
    insert_unicode,
    deep_nesting,
    huge_number,
    long_text,
    line_endings,
    bom,
    nul,
    truncate,
    escape_in_string,
)


@st.composite
def mutated(draw, base: bytes, most: int = 4) -> tuple[bytes, tuple[str, ...]]:
    """`base` after 1 to `most` random mutations; also the names of the mutations applied."""
    data, applied = base, []
    for _ in range(draw(st.integers(1, most))):
        mutation = draw(st.sampled_from(MUTATIONS))
        data = mutation(draw, data)
        applied.append(mutation.__name__)
    return data, tuple(applied)


@st.composite
def token_soup(draw) -> bytes:
    """Tokens of the language in random order: what reaches the parser's every state."""
    return b" ".join(draw(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=60)))


@st.composite
def overrides(draw) -> tuple[str, ...]:
    """`--set` arguments: mostly well-formed, sometimes mangled."""
    chosen = draw(
        st.lists(
            st.sampled_from(
                [
                    "train.batch=4",
                    "infer.batch=2",
                    "targets=[cpu]",
                    "targets=[h100, cpu]",
                    "cluster.nodes=2",
                    "train.optimizer=sgd(lr = 0.1)",
                    "train.precision=fp32",
                    "model.mmdit.depth=2",
                    "measure.repeat=3",
                    "train.batch=" + "9" * 5000,
                    "train.lr=1e999",
                    "targets=[]",
                    "on.cpu.train.batch=1",
                    "x",
                    "=",
                    "a.b.c=",
                    "train.batch=[" * 70,
                    'description="\\ud800"',
                    "train.batch=4; train.seed=1",
                    "train..batch=1",
                    "targets=[[cpu]]",
                ]
            ),
            max_size=2,
        )
    )
    if draw(st.booleans()):  # any key the settings have (and some they have not), any value
        chosen.append(f"{draw(st.sampled_from(KEYS))}={draw(VALUES)}")
    if chosen and draw(st.integers(0, 4)) == 0:
        text, _ = draw(mutated(chosen[0].encode(), most=2))
        chosen[0] = text.decode("utf-8", "replace").replace("\x00", "")  # argv holds no NUL
    return tuple(chosen)


@st.composite
def cases(draw) -> Case:
    """Every kind of input, weighted towards mutations of valid specs (the likeliest to reach
    deep into the compiler while still being wrong)."""
    roll = draw(st.integers(0, 9))
    fragment, notes = FRAGMENT, ()
    if roll <= 1:
        spec = draw(spec_texts()).encode()
    elif roll <= 4:
        spec, notes = draw(mutated(draw(spec_texts()).encode()))
    elif roll <= 7:
        spec, notes = draw(mutated(draw(st.sampled_from(list(REFERENCE_SPECS.values())))))
    elif roll == 8:
        spec = draw(st.sampled_from(INCLUDING_SPECS))
        fragment, notes = draw(mutated(FRAGMENT))
        notes = ("fragment",) + notes
    else:
        spec = draw(token_soup())
    options = draw(st.integers(0, 5))
    return Case(
        spec,
        fragment,
        overrides=draw(overrides()) if options == 0 else (),
        targets=tuple(draw(st.lists(st.sampled_from(TARGETS), min_size=1, max_size=2)))
        if options == 1
        else (),
        smoke=options in (2, 3),
        notes=notes,
    )


# ---------------------------------------------------------------- known-nasty inputs, as Cases

_SMALL = b"""experiment e {
  model mmdit { depth = 2 }
  train { batch = %s }
  targets = [cpu]
%s}
"""


def small_spec(batch: bytes = b"4", extra: bytes = b"", name: bytes = b"e") -> bytes:
    return (_SMALL % (batch, extra)).replace(b"experiment e", b"experiment " + name, 1)


def _five_sweeps() -> bytes:
    values = b", ".join(str(i).encode() for i in range(1, 101))
    return b"".join(
        b"  sweep train.%s = [%s]\n" % (key, values)
        for key in (b"batch", b"steps", b"seed", b"warmup", b"grad_accum")
    )


_SD3 = REFERENCE_SPECS["sd3.bench"]
KNOWN_NASTY = {
    "5000-digit integer": Case(small_spec(batch=b"1" * 5000)),
    "100k-deep brackets": Case(small_spec(extra=b"  x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n")),
    "100k-deep unclosed brackets": Case(b"[" * 100_000),
    "300-character experiment name": Case(small_spec(name=b"e" * 300)),
    "5 sweeps of 100 values": Case(small_spec(extra=_five_sweeps())),
    "NUL byte": Case(small_spec(batch=b"4\x00")),
    "lone surrogate escape": Case(small_spec(extra=b'  description = "\\ud800"\n')),
    # found by this fuzz: `benchc plan` printed the reference and died on UnicodeEncodeError
    "lone surrogate in a reference": Case(
        small_spec(extra=b'  reference "\\udfff" { target = cpu; value = 1; unit = "\\ud800" }\n')
    ),
    "1e999": Case(small_spec(extra=b"  train.grad_clip = 1e999\n")),
    "CRLF sd3.bench": Case(_SD3.replace(b"\n", b"\r\n")),
    "BOM sd3.bench": Case(BOM + _SD3),
    "BOM + CRLF sd3.bench": Case(BOM + _SD3.replace(b"\n", b"\r\n")),
    "CRLF fragment": Case(_SD3, fragment=FRAGMENT.replace(b"\n", b"\r\n")),
    "100k-character name": Case(small_spec(extra=b"  " + b"n" * 100_000 + b" = 1\n")),
    # found by this fuzz: the hint's search for a keyword before the bad token was quadratic
    # in the length of the line (minutes for a 100,000-character name)
    # found by this fuzz: an unhashable target name (a list, a call) was a TypeError
    "--set targets=[[cpu]]": Case(_SD3, overrides=("targets=[[cpu]]",)),
    "--set targets=[adamw(lr = 1)]": Case(_SD3, overrides=("targets=[adamw(lr = 1)]",)),
    # found by this fuzz: jsonschema's uniqueItems compares every pair of a list it cannot
    # sort; 9,000 targets, numbers and names mixed, took 14 s (a minute on a slow machine)
    "9,000 mixed targets": Case(
        small_spec().replace(
            b"targets = [cpu]",
            b"targets = [" + b", ".join(b"%d" % i if i % 2 else b"t%d" % i for i in range(9000)) + b"]",
        )
    ),
    "syntax error after a 100k-character name": Case(b"experiment " + b"e" * 100_000 + b" { batch 8 }\n"),
}

# Specs that are well formed (they load, and the schema takes them) though an earlier benchc
# refused them; found by this fuzz.
WELL_FORMED = {
    # the included file's `optimizer = adamw(...)` was taken for a block, so the including
    # file could not override it ("'train.optimizer' is a block; it cannot also be set")
    "a call overriding an included call": f"""include "{FRAGMENT_NAME}"
experiment e {{
  train.optimizer = sgd(lr = 0.1)
  targets = [cpu]
}}
""",
    "a name overriding an included call": f"""include "{FRAGMENT_NAME}"
experiment e {{
  train {{ optimizer = adam }}
  targets = [cpu]
}}
""",
}
