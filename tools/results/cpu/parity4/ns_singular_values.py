"""What each train.muon_ns does to a matrix's singular values (docs/lab/results.md, breakout's switches).

Runs appliance.train.optim.Muon's two Newton-Schulz iterations on a 128 x 64 matrix whose singular
values are spread evenly in log scale over four decades (1e-4 to 1, before the iteration's own
division by the Frobenius norm) and prints the singular values that come out (divided by the
sqrt(rows / cols) = 1.41 both multiply by, so that an exact orthogonalization gives 1.0 each), as
quantiles, and the update's Frobenius norm, divided the same way (what a step of learning rate 1 moves the weights by)::

    PYTHONPATH=. python tools/results/cpu/parity4/ns_singular_values.py
"""

import torch

from appliance.train.optim import Muon

torch.manual_seed(0)
rows, cols = 128, 64
u, _ = torch.linalg.qr(torch.randn(rows, cols, dtype=torch.float64))
v, _ = torch.linalg.qr(torch.randn(cols, cols, dtype=torch.float64))
s = torch.logspace(-4, 0, cols, dtype=torch.float64)
g = (u * s) @ v.T
for name, out in (
    ("heavyball", Muon.orthogonalize(g, 5, torch.float64)),
    ("pufferlib4", Muon.orthogonalize_pufferlib4(g, torch.float64)),
):
    sv = torch.linalg.svdvals(out) / (rows / cols) ** 0.5
    q = torch.quantile(sv, torch.tensor([0.0, 0.1, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64))
    print(
        f"{name:>10}: singular values min {q[0]:.3f}, 10% {q[1]:.3f}, 25% {q[2]:.3f}, median {q[3]:.3f}, "
        f"75% {q[4]:.3f}, max {q[5]:.3f}; Frobenius norm {out.norm() / (rows / cols) ** 0.5:.2f} (an orthogonal {rows} x {cols}: {cols**0.5:.2f})"
    )
