"""The plan a run keeps (from its build's manifest), checked again where it is read from the store.

`run`, `submit` and `ingest` check a manifest's plan, with the manifest, before anything is
stored (compiler/manifest.py, whose `plan_properties` both checks share); `runs` and `report`
check each stored plan again with the stored plans' schema (no field required: runs stored by
an earlier benchc keep fewer), because a store may have been written by an earlier benchc or
edited: a row whose plan does not match is shown as invalid with the reason, never read into a
traceback. What they read of a plan that passes, they read with ManifestPlan.read.
"""

from __future__ import annotations

import json
from functools import lru_cache

import jsonschema

from ..manifest import first_problem, plan_properties


@lru_cache(maxsize=1)
def _stored_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"type": "object", "properties": plan_properties(complete=False)})


_CHECKED: dict[str, str | None] = {}  # plan text -> its problem: the trials of a point share one plan


def stored_plan_problem(plan) -> str | None:
    """Why a stored plan cannot be read, or None (a run may have kept no plan at all)."""
    if plan is None:
        return None
    text = json.dumps(plan, sort_keys=True)
    if text not in _CHECKED:
        if len(_CHECKED) > 1000:
            _CHECKED.clear()
        _CHECKED[text] = first_problem(_stored_validator().iter_errors(plan), "plan")
    return _CHECKED[text]
