"""A study's storage lost after the sweep opened it (a PostgreSQL server stopped, its database
dropped, a journal's file system gone): one line, nothing measured lost.

The driver keeps what it knows as it goes (:class:`Known`): the study's trials and attributes as last
read, and every result this worker measured. When the storage fails
(:func:`appliance.sweep.lost.storage_failure`), the results it could not record are kept in the sweep
folder (``unrecorded.jsonl``, one JSON line a trial: its number, params and result), ``trials.md``,
``pareto.png`` and ``best.yaml`` are written from what is known (an in-memory copy of the study), and
one line names the failure, the kept file and what to do (:func:`keep_what_is_known`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError
from appliance.safe_files import append_line
from appliance.sweep.lost import StorageLost
from appliance.sweep.results import write_outputs
from appliance.sweep.study import INTERRUPTED

UNRECORDED = "unrecorded.jsonl"


@dataclass
class Known:
    """What this worker knows of its study, kept while the storage answers: its attributes and trials
    as last read, and the results this worker measured (by trial number: params, distributions,
    result)."""

    attrs: dict[str, Any] = field(default_factory=dict)
    trials: dict[int, Any] = field(default_factory=dict)
    ours: dict[int, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = field(default_factory=dict)

    def refresh(self, study: Any) -> None:
        self.attrs = dict(study.user_attrs)
        self.trials = {t.number: t for t in study.get_trials(deepcopy=True)}

    def measured(self, trial: Any, result: dict[str, Any]) -> None:
        self.ours[trial.number] = (dict(trial.params), dict(trial.distributions), dict(result))


def keep_what_is_known(
    known: Known, lost: StorageLost, space: Any, out: Path, env: str, where: str
) -> Iterator[str]:
    """Keep each unrecorded result in ``unrecorded.jsonl``, write the sweep's files from what is
    known, then raise the one line saying so."""
    kept = out / UNRECORDED
    numbers = []
    for trial, result in lost.unrecorded:
        known.measured(trial, result)
        numbers.append(trial.number)
        line = json.dumps(
            {"trial": trial.number, "params": dict(trial.params), "result": result}, default=str
        )
        try:
            append_line(kept, line + "\n", "the sweep's unrecorded trials", sync=True)
        except (OSError, ApplianceError) as e:
            raise ApplianceError(
                f"the study's storage failed while the sweep ran ({lost.why}), and {kept} cannot be "
                f"written ({getattr(e, 'strerror', None) or e}): not recorded: "
                + "; ".join(
                    json.dumps({"trial": t.number, "result": r}, default=str) for t, r in lost.unrecorded
                )
            ) from None
    study = in_memory(known)
    wrote: list[str] = []
    try:
        for line in write_outputs(study, space, out, env):
            wrote.append(line)
            yield line
        files = "trials.md and best.yaml" if any("best.yaml" in w for w in wrote) else "trials.md"
        outputs = f"wrote {files} from the {len(_finished(study))} trials known here"
    except ApplianceError as e:  # a full disk too: its own words
        outputs = f"the sweep's files not written: {e}"
    saved = (
        f"kept the result of trial{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))} "
        f"in {kept} (not recorded in {where}; {'they run' if len(numbers) > 1 else 'it runs'} again); "
        if numbers
        else ""
    )
    raise ApplianceError(
        f"the study's storage failed while the sweep ran ({lost.why}): {saved}{outputs}; "
        "run the same command again once the storage is back"
    )


def _finished(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    return [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    ]


def in_memory(known: Known) -> Any:
    """An in-memory study holding what is known: the trials as last read, this worker's results over
    them, with the same numbers (a trial not known finished is an interrupted one, not counted)."""
    import optuna
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"])
    for k, v in known.attrs.items():
        study.set_user_attr(k, v)
    last = max([*known.trials, *known.ours], default=-1)
    finished = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    for number in range(last + 1):
        t = known.trials.get(number)
        if number in known.ours:
            params, dists, result = known.ours[number]
            attrs = {**(t.user_attrs if t is not None else {}), **_attrs(result)}
            state = {"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED}.get(
                result["state"], TrialState.FAIL
            )
            values = [result["score"], result["seconds"]] if state == TrialState.COMPLETE else None
            frozen = create_trial(
                state=state, values=values, params=params, distributions=dists, user_attrs=attrs
            )
        elif t is not None and t.state in finished:
            frozen = create_trial(
                state=t.state,
                values=t.values,
                params=t.params,
                distributions=t.distributions,
                user_attrs=t.user_attrs,
            )
        else:  # running, waiting or unknown here: not counted
            frozen = create_trial(state=TrialState.FAIL, user_attrs={"error": INTERRUPTED})
        study.add_trial(frozen)
    return study


def _attrs(result: dict[str, Any]) -> dict[str, Any]:
    attrs = {
        k: result[k] for k in ("curve", "steps", "error", "reason", "score") if result.get(k) is not None
    }
    attrs["seconds"] = result.get("seconds")
    return attrs
