"""Train a run as ``puffer-bench train`` does and, after one epoch, perturb it without a restart.

A resumed run restarts every game (``tools/resume_variants.py`` measures what that changes). This
tool asks the other half of the question: does any small perturbation at the same point, with the
games and the recurrent state going on untouched, move the run as far? From ``--at-epoch`` on the
run draws its actions and its prioritized segments from another seed (``train.seed`` +
``--seed-offset``); everything else (weights, optimizer, counters, schedules, the games) goes on as
it was. The run before that epoch is the plain run's to the bit (training on a CPU is
deterministic: compare its checkpoint at that epoch with the plain run's).

Everything after ``--`` is a ``puffer-bench`` command line (``train ...``)::

    python tools/perturb_run.py --at-epoch 129 --seed-offset 1000 -- train breakout \\
        --config bench/parity/pufferlib4/breakout.yaml --run-id rz-reseed-s1 --train.seed 1 \\
        --stop-steps 80e6 --train.checkpoint-interval 129

docs/lab/learning.md ("What a resume changes") has the runs it measured.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tool_cli  # a sibling script, not a package


def install(at_epoch: int, offset: int) -> None:
    """Make ``puffer-bench train``'s trainer take the seed ``train.seed + offset`` once its epoch
    ``at_epoch`` has been trained (a subclass put where the session looks the class up)."""
    from appliance.config.build import Section
    from appliance.train import trainer as trainer_module

    base = trainer_module.Trainer

    class Perturbed(base):  # type: ignore[misc, valid-type]
        def train(self) -> dict[str, float]:
            losses: dict[str, float] = super().train()
            if self.epoch == at_epoch:
                seed = int(self.hp.seed) + offset
                self.hp = Section("train", {**self.hp, "seed": seed})
                print(f"perturb_run: after epoch {self.epoch} ({self.global_step:,} agent-steps) "
                      f"actions and segments are drawn with seed {seed}", flush=True)  # fmt: skip
            return losses

    trainer_module.Trainer = Perturbed  # type: ignore[misc]


def body(a: Any, command: list[str]) -> int:
    if not command or command[0] != "train":
        raise tool_cli.ToolError("after -- give a puffer-bench train command line (train ENV ...)")
    install(a.at_epoch, a.seed_offset)
    from appliance.cli import main as cli_main

    sys.argv = ["puffer-bench", *command]
    try:
        cli_main()
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    ap = tool_cli.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--at-epoch", type=tool_cli.number(1, 10**9, integer=True), required=True,
                    help="the epoch after whose update the seed changes")  # fmt: skip
    ap.add_argument("--seed-offset", type=tool_cli.number(1, 10**9, integer=True), default=1000,
                    help="added to train.seed (default 1000)")  # fmt: skip
    a = ap.parse_args(argv[:split])
    return tool_cli.guarded(lambda: body(a, argv[split + 1 :]))


if __name__ == "__main__":
    sys.exit(main())
