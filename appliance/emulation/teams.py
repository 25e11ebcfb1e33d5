"""Mixed teams: PettingZoo agents whose observation or action spaces differ (predator and prey),
trained by one shared policy.

Agents are grouped into kinds, one per distinct (observation space, action space) pair, in the
order of ``possible_agents``. Each agent's observation is flattened by its own codec, padded with
zeros to the largest kind's size, and followed by a one-hot of its kind, so the shared policy
knows whose row it reads (a padded 14 looks like a 16 that ends in zeros otherwise). Actions:

* the same space for every kind: as it is;
* Discrete spaces of different sizes: one Discrete of the largest, and an agent with fewer actions
  takes the policy's choice modulo its own count;
* flat Box spaces of different sizes: one Box of the largest (the union of the bounds), of which an
  agent takes its first dims;
* anything else is refused with a line that says why.

The alternative, one policy per kind, would need as many trainers as kinds; a shared policy with a
kind feature is what the trainer's one-policy rows can hold, and what ``train`` says it did.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from appliance.emulation.codecs import ActionCodec, SpaceCodec
from appliance.emulation.contracts import describe_space
from appliance.errors import ConfigError


def _index(kinds: list[tuple[Any, Any]], pair: tuple[Any, Any]) -> int:
    for k, known in enumerate(kinds):
        if known[0] == pair[0] and known[1] == pair[1]:
            return k
    kinds.append(pair)
    return len(kinds) - 1


class MixedTeam:
    """The padded spaces of a team whose agents' spaces differ, and each agent's way in and out."""

    def __init__(self, name: str, agents: list[Any], obs: dict[Any, Any], act: dict[Any, Any]) -> None:
        self.name = name
        self.kinds: list[tuple[Any, Any]] = []
        self.kind_of = [_index(self.kinds, (obs[a], act[a])) for a in agents]
        self.members = [
            [a for a, k in zip(agents, self.kind_of, strict=True) if k == i] for i in range(len(self.kinds))
        ]
        self.obs_codecs = [SpaceCodec(o) for o, _ in self.kinds]
        for (o, _), codec, members in zip(self.kinds, self.obs_codecs, self.members, strict=True):
            if not codec.same_dtype:
                raise ConfigError(
                    f"{name}: agents' observation spaces differ and {members[0]!r}'s mixes dtypes "
                    f"({describe_space(o)}); a mixed team needs numeric observations to pad"
                )
        self.width = max(c.size for c in self.obs_codecs)
        count = len(self.kinds)
        low = np.zeros(self.width + count, np.float32)
        high = np.ones(self.width + count, np.float32)
        low[: self.width], high[: self.width] = np.inf, -np.inf
        for codec in self.obs_codecs:
            flat = codec.flat_space
            low[: codec.size] = np.minimum(low[: codec.size], flat.low.astype(np.float32))
            high[: codec.size] = np.maximum(high[: codec.size], flat.high.astype(np.float32))
            low[codec.size : self.width] = np.minimum(low[codec.size : self.width], 0)  # the padding
            high[codec.size : self.width] = np.maximum(high[codec.size : self.width], 0)
        self.observation_space = spaces.Box(low, high, (self.width + count,), np.float32)
        self.act_codecs = [ActionCodec(a) for _, a in self.kinds]
        prefixes = [str(m[0]).rstrip("0123456789").rstrip("_") for m in self.members]
        unique = len(set(prefixes)) == len(prefixes) and all(p.isidentifier() for p in prefixes)
        self.kind_names = prefixes if unique else [f"kind{k}" for k in range(len(self.kinds))]
        self.action_space, self.actions_how = self._action_space(name)

    def _action_space(self, name: str) -> tuple[spaces.Space, str]:
        flats = [c.flat_space for c in self.act_codecs]
        if all(f == flats[0] for f in flats):
            return flats[0], "the same actions"
        if all(isinstance(f, spaces.Discrete) for f in flats):
            most = max(int(f.n) for f in flats)
            self._fold = [int(f.n) for f in flats]
            return spaces.Discrete(most), f"Discrete({most}), folded modulo each kind's count"
        if all(c.kind == "box" for c in self.act_codecs):
            size = max(c.size for c in self.act_codecs)
            low, high = np.full(size, np.inf, np.float32), np.full(size, -np.inf, np.float32)
            for f in flats:
                n = f.shape[0]
                low[:n], high[:n] = np.minimum(low[:n], f.low), np.maximum(high[:n], f.high)
            low[np.isinf(low)], high[np.isinf(high)] = -1.0, 1.0  # dims no kind has: never read
            return spaces.Box(low, high, (size,), np.float32), f"Box({size},), each kind its first dims"
        shown = ", ".join(describe_space(a) for _, a in self.kinds)
        raise ConfigError(
            f"{name}: agents' action spaces differ ({shown}); a mixed team is trained when they are all "
            "Discrete or all flat Box"
        )

    def write(self, row: int, sample: Any, out: np.ndarray) -> None:
        """Agent ``row``'s observation into ``out`` (zeroed by the caller): its own values, zeros to
        the widest kind's size, then its kind's one-hot."""
        kind = self.kind_of[row]
        codec = self.obs_codecs[kind]
        out[: codec.size] = codec.flatten(sample)
        out[self.width + kind] = 1.0

    def action(self, row: int, flat: np.ndarray) -> Any:
        """The policy's action row for agent ``row``, in that agent's own action space."""
        kind = self.kind_of[row]
        codec = self.act_codecs[kind]
        if hasattr(self, "_fold"):
            return codec.unflatten(np.asarray(int(flat) % self._fold[kind]))
        if codec.kind == "box":
            return codec.unflatten(np.asarray(flat)[: codec.size])
        return codec.unflatten(flat)

    def kind_returns(self, returns: np.ndarray) -> dict[str, float]:
        """``{"<kind>_return": mean episode return of its agents}`` from the agents' returns, a kind
        named by its agents' common prefix (``adversary`` for adversary_0..2), else ``kind<i>``."""
        out = {}
        for k, name in enumerate(self.kind_names):
            rows = [row for row, kind in enumerate(self.kind_of) if kind == k]
            out[f"{name}_return"] = float(np.mean(returns[rows]))
        return out

    def obs_codec(self, row: int) -> SpaceCodec:
        return self.obs_codecs[self.kind_of[row]]

    def describe(self) -> str:
        """One line for ``train``: the kinds, and what was done to give them one policy."""
        kinds = "; ".join(
            f"{_names(members)}: observations {codec.size}"
            + (f", actions {describe_space(a)}" if "same" not in self.actions_how else "")
            for members, codec, (_, a) in zip(self.members, self.obs_codecs, self.kinds, strict=True)
        )
        return (
            f"mixed team: {len(self.kinds)} kinds of agent ({kinds}); one shared policy, observations "
            f"padded to {self.width} plus a one-hot of the kind ({self.width + len(self.kinds)} values)"
            + ("" if "same" in self.actions_how else f", actions {self.actions_how}")
        )


def _names(members: list[Any]) -> str:
    shown = ", ".join(map(str, members[:3]))
    return (
        f"{len(members)} agents ({shown}{', ...' if len(members) > 3 else ''})" if len(members) > 1 else shown
    )
