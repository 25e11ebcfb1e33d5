"""``train``'s self-tuning: time the candidates :mod:`appliance.config.autotune` offers for this run's
config on this machine, pick by its rule, keep the choice per machine fingerprint and reuse it.

It lives here, above the trainer and the noise guard, because it builds trainers and judges their
speeds; what it tries, the rule and the store are below it in ``config/`` (plain data, no timing).

How it measures, within ``budget_s`` (about a minute):

1. a screen: the profile's settings, then one key at a time (:func:`appliance.config.autotune.axes`:
   env threads or workers, then buffers), each value with the other keys at the fastest found so
   far; each built in turn (its vector and trainer), one rollout to warm up, then rollouts
   (``Trainer.evaluate``) for a share of the budget (one at the least), agent-steps/s. Every value
   is timed, so on a slow or busy machine the whole may run past the budget (the result line says
   how long it took);
2. a confirmation: the fastest candidate that is not the profile's, beside the profile's own
   settings (both kept built from the screen), in interleaved pairs (A B, B A, ...; at least :data:`MIN_PAIRS`), with the
   noise guard's sampler running; its ratio and interval (:func:`appliance.measure.stats.ratio_test`)
   and the guard's busy flag go to :func:`appliance.config.autotune.keep_candidate`.

Only the rollout is timed: the tuned keys (env threads or workers, engine buffers) act on it alone;
the update is the same for every candidate. torch's threads are chosen for each build as ``train``
chooses them (:mod:`appliance.config.threads`).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from appliance.config import autotune
from appliance.errors import ApplianceError

if TYPE_CHECKING:
    from appliance.config import Config

MIN_PAIRS = 3
MAX_PAIRS = 6
OVER_BUDGET = 3.0  # a screen projected past this many budgets is not run: the profile's settings stay
SCREEN_SHARE = 0.5  # of the budget for the screen; the rest confirms

Progress = Callable[[str], None]
Build = Callable[[Any, dict[str, Any]], contextlib.AbstractContextManager[Any]]
Sample = Callable[[Any, float], float]


def _copy(cfg: Config) -> Config:
    import copy

    from appliance.config import Config

    return Config(
        copy.deepcopy(cfg.data),
        env_name=cfg.env_name,
        profile=cfg.profile,
        sources=list(cfg.sources),
        family=cfg.family,
        history=copy.deepcopy(cfg.history),
    )


def _cores() -> int:
    from appliance.sysinfo import physical_cores
    from appliance.vector.sizes import usable_cores

    return min(usable_cores(), physical_cores())


@contextlib.contextmanager
def build_trainer(cfg: Config, choice: dict[str, Any]) -> Iterator[Any]:
    """A trainer of ``cfg`` with ``choice`` set, env threads chosen as ``train`` chooses them, warmed
    up by one rollout; closed (its envs and workers with it) on the way out, Ctrl-C included."""
    from appliance import vector
    from appliance.config import threads
    from appliance.train import Trainer

    c = _copy(cfg)
    autotune.apply(c, choice, "autotune candidate")
    cores, busy = _cores(), threads.others_busy(seconds=0.1)
    threads.apply_env_threads(c.data, cores, busy)
    vec = vector.make_from_config(c)
    try:
        trainer = Trainer(c, vec)
    except BaseException:
        vec.close()
        raise
    try:
        params = sum(p.numel() for p in trainer.policy.parameters())
        threads.apply_torch(threads.choose(cores, busy, params, int(c.train.minibatch_size)))
        trainer.evaluate()  # warm-up: allocator, first resets
        yield trainer
    finally:
        trainer.close()


def rollout_sps(trainer: Any, seconds: float) -> float:
    """Rollout agent-steps/s over whole rollouts lasting at least ``seconds`` (one at the least)."""
    start, steps = time.perf_counter(), trainer.global_step
    while True:
        trainer.evaluate()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return (trainer.global_step - steps) / elapsed


def _guard() -> tuple[Any, Callable[[list[dict[str, Any]]], dict[str, Any]]]:
    from appliance.measure.noise.readings import Sampler, summarize

    return Sampler(), summarize


def tune(
    cfg: Config,
    budget_s: float = autotune.BUDGET_S,
    progress: Progress | None = None,
    cores: int | None = None,
    build: Build | None = None,
    sample: Sample | None = None,
    guard: Callable[[], tuple[Any, Callable[[list[dict[str, Any]]], dict[str, Any]]]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    patient: bool = False,
) -> dict[str, Any] | None:
    """Time the candidates for ``cfg`` and pick by the rule; None where there is nothing to tune (a
    serial backend, every tunable key set by the user). The result: ``chosen`` (``{}``: the
    profile's settings), the screen's speeds, the confirmation's samples, ratio, interval and busy
    flag, and the seconds it took. Where the profile's own build and sample show that the whole
    screen would run past :data:`OVER_BUDGET` budgets (a recipe whose rollout alone takes many
    seconds), it stops there and keeps the profile's settings (``too_slow``), unless ``patient``."""
    from appliance.measure.stats import ratio_test

    say = progress or (lambda _line: None)
    build, sample, guard = build or build_trainer, sample or rollout_sps, guard or _guard
    axes = autotune.axes(cfg, cores or _cores())
    if not axes:
        return None
    count = 1 + sum(len(values) for _, values in axes)
    start = clock()
    sample_s = max(0.2, budget_s * SCREEN_SHARE / count / 3)  # a build and its warm-up: about two samples
    screen: list[dict[str, Any]] = []
    a: list[float] = []
    b: list[float] = []
    sampler, summarize = guard()
    with contextlib.ExitStack() as held, contextlib.ExitStack() as best_held:
        # the profile's trainer and the best other so far stay built for the confirmation; the rest close
        profile_trainer = held.enter_context(build(cfg, {}))
        screen.append({"choice": {}, "sps": sample(profile_trainer, sample_s)})
        say(f"autotune: [1/{count}] {autotune.describe({})}: {screen[0]['sps']:,.0f} agent-steps/s")
        one = clock() - start  # a build, its warm-up and a sample: a rollout's length sets it
        if not patient and one * count > OVER_BUDGET * max(
            budget_s, autotune.BUDGET_S
        ):  # a heavy recipe (many agents a rollout): not worth it
            return {
                "chosen": {}, "candidate": {}, "screen": screen, "profile_sps": [screen[0]["sps"]],
                "candidate_sps": [], "ratio": None, "interval": None, "busy": False, "busy_reasons": [],
                "too_slow": round(one * count, 1), "settings": count, "seconds": round(one, 1),
            }  # fmt: skip
        best_trainer, best, fastest = None, None, screen[0]
        for dotted, values in axes:  # one key at a time, the others at the fastest so far
            base = dict(fastest["choice"])
            for value in values:
                choice = {**base, dotted: value}
                try:
                    with contextlib.ExitStack() as trying:
                        trainer = trying.enter_context(build(cfg, choice))
                        sps = sample(trainer, sample_s)
                        if best is None or sps > best["sps"]:
                            best_held.close()  # the previous best
                            best_held.push(trying.pop_all())
                            best_trainer = trainer
                except ApplianceError as e:  # a rule this setting breaks here: said, and not chosen
                    say(f"autotune: {autotune.describe(choice)}: not usable here: {e}")
                    continue
                screen.append({"choice": choice, "sps": sps})
                if best is None or sps > best["sps"]:
                    best = screen[-1]
                say(
                    f"autotune: [{len(screen)}/{count}] {autotune.describe(choice)}: {sps:,.0f} agent-steps/s"
                )
            fastest = max([fastest, *(r for r in screen if dotted in r["choice"])], key=lambda r: r["sps"])
        if best is None:
            return None
        pair_s = max(sample_s, (budget_s - (clock() - start)) / (2 * MIN_PAIRS))
        say(
            f"autotune: confirming {autotune.describe(best['choice'])} against the profile's settings in turns"
        )
        with sampler:
            pairs = 0
            while pairs < MIN_PAIRS or (pairs < MAX_PAIRS and clock() - start + 2 * pair_s < budget_s):
                order = [(a, profile_trainer), (b, best_trainer)]
                for side, trainer in order if pairs % 2 == 0 else order[::-1]:
                    side.append(sample(trainer, pair_s))
                pairs += 1
                say(f"autotune: pair {pairs}: profile {a[-1]:,.0f}, candidate {b[-1]:,.0f} agent-steps/s")
    noise = summarize(list(getattr(sampler, "readings", [])))
    ratio, interval, _p = ratio_test(a, b)
    busy = bool(noise.get("busy"))
    keep = autotune.keep_candidate(ratio, interval, busy)
    return {
        "chosen": dict(best["choice"]) if keep else {},
        "candidate": dict(best["choice"]),
        "screen": screen,
        "profile_sps": a,
        "candidate_sps": b,
        "ratio": ratio,
        "interval": interval,
        "busy": busy,
        "busy_reasons": noise.get("reasons", []),
        "seconds": round(clock() - start, 1),
    }


def result_line(cfg: Config, result: dict[str, Any]) -> str:
    """One line: what was chosen, what it measured, and why."""
    if result.get("too_slow"):
        return (
            f"autotune: kept the profile's settings (one setting took {result['seconds']:.0f} s to build and time "
            f"here, so the {result['settings']} would take about {result['too_slow']:.0f} s, past "
            f"{OVER_BUDGET:.0f}x the budget; --autotune redo runs them anyway)"
        )
    a, b = statistics.median(result["profile_sps"]), statistics.median(result["candidate_sps"])
    ci = result["interval"]
    measured = (
        f"{autotune.describe(result['candidate'])} {b:,.0f} against the profile's {a:,.0f} rollout agent-steps/s, "
        f"ratio {result['ratio']:.3f}"
        + (f" ({ci[0]:.3f}-{ci[1]:.3f})" if ci else "")
        + f" over {len(result['profile_sps'])} pairs in turns, {result['seconds']:.0f} s"
    )
    if result["chosen"]:
        return f"autotune: chose {autotune.describe(result['chosen'])}: {measured}"
    why = (
        f"the machine was busy: {'; '.join(result['busy_reasons'])}"
        if result["busy"]
        else "the candidate was not faster beyond the interval"
    )
    return f"autotune: kept the profile's settings ({why}): {measured}"


def autotune_run(
    cfg: Config,
    option: str | None,
    echo: Progress,
    budget_s: float = autotune.BUDGET_S,
    environ: dict[str, str] | None = None,
) -> None:
    """``train``'s hook: with ``--autotune on`` (the default) reuse this machine's tuning for the
    recipe, or tune it now and keep it; ``redo`` tunes again; ``off`` does nothing. Sets the chosen
    values in ``cfg`` and says what it did in one line (progress lines while it tunes)."""
    mode = autotune.mode(option, environ)
    if mode == "off":
        return
    cores = _cores()
    key, facts = autotune.machine(cores, cfg)
    path = autotune.store_path(key, environ)
    store, warning = autotune.load(path)
    if warning:
        echo(f"warning: {warning}")
    recipe = autotune.recipe_key(cfg)
    keys = {f"{s}.{k}" for s, k in autotune.tunable(cfg)}
    entry = store["entries"].get(recipe) if mode == "on" else None
    tries = autotune.busy_tries(entry)
    if entry is not None and 0 < tries < autotune.BUSY_TRIES:
        echo(
            f"autotune: the tuning of {entry['when']} found the machine busy, so it decided nothing: "
            "timing again (--autotune off skips it)"
        )
        entry = None
    if entry is not None:
        chosen = {k: v for k, v in entry["chosen"].items() if k in keys}
        autotune.apply(cfg, chosen, f"autotune ({path})")
        busy = f", busy {tries} times running" if tries else ""
        echo(
            f"autotune: reused {autotune.describe(chosen)} for {cfg.env_name} on this machine, "
            f"tuned {entry['when']}{busy} ({path}; --autotune redo measures again, off skips it)"
        )
        return
    if not autotune.axes(cfg, cores):
        return  # nothing to tune: a serial backend, or the user set every key
    echo(
        f"autotune: first run of {cfg.env_name} on this machine: timing settings that do not change "
        f"learning for about {budget_s:.0f} s (--autotune off skips it)"
    )
    result = tune(cfg, budget_s, echo, cores, patient=mode == "redo")
    if result is None:
        echo("autotune: no other setting could be built here: the profile's settings stay (not kept)")
        return
    autotune.apply(cfg, result["chosen"], f"autotune ({path})")
    line = result_line(cfg, result)
    entry = {
        "env": cfg.env_name,
        "when": autotune.now(),
        "chosen": result["chosen"],
        "line": line,
        "measured": {
            k: result[k] for k in ("screen", "profile_sps", "candidate_sps", "ratio", "interval", "busy")
        },
    }
    if result["busy"]:  # counted, so that a machine that is always busy is not timed on every run
        entry["busy_tries"] = tries + 1
    failed = autotune.save(path, store, facts, recipe, entry)
    echo(line)
    if failed:
        echo(f"warning: {failed}")
