"""The setup behind a report's numbers. One job: what each row's latest run says of the
software and state it ran on (benchc's version, the spec's repository revision and whether it
had uncommitted changes, the device, the library and runtime versions the program recorded),
and the lines that say it per target, and where two targets' setups differ, what differs, so
two numbers from different setups are never set side by side without saying so."""

from __future__ import annotations

from collections import defaultdict

# the program's recorded versions a reader compares setups by, in this order
VERSIONS = ("torch", "cuda", "cudnn", "nccl", "driver", "firmware", "card_firmware", "synapseai",
            "habana-torch-plugin", "container", "transformers", "diffusers", "accelerate", "deepspeed",
            "optimum-habana", "python")  # fmt: skip


def setup_of(environment, metrics) -> tuple[tuple[str, str], ...]:
    """(name, value) of what a run ran on, from its stored environment and its metrics; ()
    where neither says anything."""
    env = environment if isinstance(environment, dict) else {}
    m = metrics if isinstance(metrics, dict) else {}
    found: dict[str, str] = {}
    if isinstance(env.get("benchc"), str):
        found["benchc"] = env["benchc"]
    repo = env.get("spec_repository")
    if isinstance(repo, dict) and isinstance(repo.get("revision"), str):
        state = "uncommitted changes" if repo.get("dirty") else "clean"
        if repo.get("spec_tracked") is False:
            state = "the spec not committed"
        found["spec revision"] = f"{repo['revision'][:12]} ({state})"
    if isinstance(m.get("device_name"), str):
        found["device"] = m["device_name"]
    versions = m.get("versions") if isinstance(m.get("versions"), dict) else {}
    for name in VERSIONS:
        if isinstance(versions.get(name), str):
            found[name] = versions[name]
    return tuple(found.items())


def setup_lines(section) -> list[str]:
    """One line per target (the setup of its rows; each distinct one where its rows differ),
    then one per pair of targets whose setups differ in benchc, the spec's revision or a
    library both recorded."""
    by_target: dict[str, list[tuple]] = defaultdict(list)
    for row in section.rows:
        if row.setup and row.setup not in by_target[row.target]:
            by_target[row.target].append(row.setup)
    lines = []
    for target, setups in sorted(by_target.items()):
        for setup in setups:
            lines.append(f"{target}: " + ", ".join(f"{k} {v}" for k, v in setup))
    targets = sorted(by_target)
    for i, first in enumerate(targets):
        for second in targets[i + 1 :]:
            a, b = dict(by_target[first][-1]), dict(by_target[second][-1])
            shared = [k for k in ("benchc", "spec revision", *VERSIONS) if k in a and k in b and a[k] != b[k]]
            if shared:
                apart = "; ".join(f"{k} {a[k]} vs {b[k]}" for k in shared)
                lines.append(f"{first} and {second} ran on different setups: {apart}")
    return lines
