"""tanh_fma_fit.py (session 37): the coefficients of score_mod.cuh's tanh_fma, tanh(|x|) on [0, T] as a
polynomial in t = |x| * 2 / T - 1 (Chebyshev interpolation, converted to the power basis in t, whose
float32 coefficients stay well conditioned on [-1, 1]; a power basis in |x| itself lost ~1e-3 to
cancellation at degree 12), and its error in float32 Horner evaluation (each step rounded, as FFMA
does) against float64 tanh over [0, 2T], clamped at T: tanh_fma(x) = sign(x) p(t(min(|x|, T))).

    python3 scripts/dev/tanh_fma_fit.py [--limit 5.0] [--degree 11]

Prints the coefficients (highest degree first, as the Horner loop takes them) and the maximum
absolute error; MUFU.TANH's bound, for comparison, is 2^-10.99 relative (4.9e-4 near saturation).
"""

from __future__ import annotations

import argparse

import numpy as np


def fit(limit: float, degree: int) -> np.ndarray:
    cheb = np.polynomial.chebyshev.Chebyshev.interpolate(np.tanh, degree, domain=[0.0, limit])
    return np.polynomial.chebyshev.cheb2poly(cheb.coef).astype(np.float32)  # ascending powers of t


def evaluate(coef: np.ndarray, x: np.ndarray, limit: float) -> np.ndarray:
    a = np.minimum(np.abs(x), np.float32(limit)).astype(np.float32)
    t = (a.astype(np.float64) * np.float32(2.0 / limit) - 1.0).astype(np.float32)
    acc = np.full_like(t, coef[-1])
    for c in coef[-2::-1]:
        acc = (acc.astype(np.float64) * t + c).astype(np.float32)
    return np.copysign(acc, x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=float, default=5.0)
    parser.add_argument("--degree", type=int, default=11)
    args = parser.parse_args()
    coef = fit(args.limit, args.degree)
    x = np.linspace(-2 * args.limit, 2 * args.limit, 800_001).astype(np.float32)
    err = np.abs(evaluate(coef, x, args.limit).astype(np.float64) - np.tanh(x.astype(np.float64)))
    print(f"limit {args.limit}, degree {args.degree}: max |error| {err.max():.3e} at x = {x[err.argmax()]:.4f}")
    print("coefficients, highest power of t first:")
    print(", ".join(f"{c!r}f".replace("np.float32(", "").replace(")", "") for c in coef[::-1]))


if __name__ == "__main__":
    main()
