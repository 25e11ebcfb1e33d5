"""``train --resume RUN``: the config a run continues with, from its own config.yaml under the
command line's layers (:func:`resume_config`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.config.runs import pick_profile, run_config
from appliance.errors import ConfigError
from appliance.redact import hidden_values, secret_key

if TYPE_CHECKING:
    from appliance.config import Config


def resume_config(
    resume: str,
    env: str | None,
    profile: str | None,
    config_file: str | None,
    overrides: list[str],
    family: str | None = None,
) -> tuple[Config, list[str]]:
    """The config ``train --resume RUN`` continues with: the run's own config.yaml (its env, core,
    recipe and seed), then ``--config`` and the command line over it, as :func:`run_config`'s layers
    are. Returns it and the lines that say so (which config, what the command line changed). ENV may
    be left out; one that is not the run's env is refused. A run folder without config.yaml (a copied
    model.pt) resolves from ENV as a new run does."""
    from appliance.config import parse_overrides, resolve
    from appliance.config.files import read_yaml
    from appliance.train import runs

    given = parse_overrides(overrides)
    data_dir = (given.get("train") or {}).get("data_dir")
    if data_dir is None:
        data_dir = (
            run_config(env, profile, config_file, overrides, family) if env else resolve()
        ).train.data_dir
    checkpoint = runs.find_checkpoint(data_dir, resume)
    saved = checkpoint.parent / "config.yaml"
    if not saved.exists() and not saved.is_symlink():  # a FIFO, folder or link there is refused below
        if env is None:
            raise ConfigError(
                f"--resume {resume}: {checkpoint.parent} has no config.yaml to take the run's settings from; "
                "name the ENV and the settings it was trained with (--config FILE, --section.key VALUE)"
            )
        return run_config(env, profile, config_file, overrides, family), []
    run_env = read_yaml(saved, "the resumed run's config", follow=False).get("env_name")
    if not isinstance(run_env, str) or not run_env:
        raise ConfigError(
            f"the resumed run's config {saved} names no env_name: it is not a run's config.yaml"
        )
    if env is not None and env != run_env:
        raise ConfigError(
            f"--resume {resume} ({checkpoint}) is a run of {run_env}, not {env}: pass {run_env} or leave ENV out"
        )
    cfg = resolve(
        env=run_env,
        profile=pick_profile(profile),
        config_file=config_file,
        overrides=overrides,
        family=family,
        resumed=saved,
    )
    left_out = hidden_values(cfg.data)
    if left_out:  # secrets are never written into config.yaml: the command line gives them again
        options = ", ".join(
            f"--{k.split('.', 1)[0]}.{k.split('.', 1)[1].replace('_', '-')}" for k in left_out
        )
        raise ConfigError(
            f"--resume {resume}: {saved} does not hold {', '.join(left_out)} (a secret is never written "
            f"there): give {'it' if len(left_out) == 1 else 'them'} again ({options})"
        )
    before = resolve(env=run_env, profile=pick_profile(profile), family=family, resumed=saved)
    changed = [
        f"{section}.{key} {before.data[section][key]!r} -> {value!r}"
        if not secret_key(key)
        else f"{section}.{key} given again"
        for section, values in cfg.data.items()
        for key, value in values.items()
        if before.data[section].get(key) != value
    ]
    lines = [f"resuming with the run's config {saved}"]
    lines += [
        f"  {src.split(' (', 1)[1].rstrip(')')}" for src in cfg.sources if src.startswith(f"{saved} (keys")
    ]
    if changed:
        lines.append("changed for this resume: " + "; ".join(changed))
    return cfg, lines
