"""Advantages: V-trace-clipped GAE over ``[segments, horizon]`` rows.

Position t of a row holds what the trainer had when it chose action t: the observation, the value
V_t, and the reward r_t and done flag d_t that arrived *with* that observation (the results of
action t-1). So action t's outcome is (r_{t+1}, d_{t+1}) and, backward over t:

    delta_t = min(rho_t, rho_clip) * (r_{t+1} + gamma * V_{t+1} * (1 - d_{t+1}) - V_t)
    A_t     = delta_t + gamma * lambda * min(rho_t, c_clip) * (1 - d_{t+1}) * A_{t+1}

with A_{T-1} = 0 (its outcome is not in the row). With rho = 1 this is exactly GAE(gamma, lambda).
This torch version is the reference; a fused GPU kernel can replace it behind the same function.
"""

from __future__ import annotations

from appliance.gpu.reference import advantage as compute_advantages

__all__ = ["compute_advantages"]
