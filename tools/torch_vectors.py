#!/usr/bin/env python3
"""PyTorch's conv2d, pooling and batch norm on fixed inputs: the test vectors
of sim/tests/sim/torch.rs, written to sim/tests/data/torch/*.json.

torch is not a dependency of Tessera: this script ran once and its output is
committed. To run it again (any CPU machine; the PyPI wheel needs its
nvidia-* dependencies installed to import, even without a GPU, about 5 GB):

    python3 -m venv /tmp/torch-venv
    /tmp/torch-venv/bin/pip install torch==2.15.0
    /tmp/torch-venv/bin/python tools/torch_vectors.py sim/tests/data/torch

The committed vectors came from torch 2.15.0+cu132 on the CPU (Python
3.11.7). Inputs are drawn in f32 from fixed seeds and written exactly (the
shortest decimal that reads back as the same f32). Expected outputs are
torch's results on those inputs in float64, rounded to 9 significant digits:
a reference whose own error is far below f32's. The script also runs torch in
float32 and checks that torch's own f32 results meet the tolerance the Rust
tests use (TOL below); the largest such error per tensor is written beside
the expected values (`torch_f32_err`, in units of the tolerance).

Semantics covered (torch.nn.functional, NCHW, no bias):
- conv2d: kernel sizes 1-7 (square and not), stride 1-3, padding 0-3;
  outputs, input and weight gradients from a given upstream gradient.
- max_pool2d and avg_pool2d (count_include_pad=True, torch's default and the
  simulator's; ceil_mode=False), with padding, overlapping windows and ties
  (max routes the gradient to the first maximum in window order);
  adaptive_avg_pool2d(x, 1) as global average pooling.
- batch_norm then ReLU (the simulator's fused layer): in training (batch
  statistics over N, H, W, biased variance to normalise, eps 1e-5; the
  running mean and the unbiased variance folded into running statistics
  (0, 1) with momentum 0.1), forward and backward (input, gamma, beta
  gradients); in evaluation (running statistics), forward.
"""

import json
import struct
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

# |got - want| <= TOL * (max(1, max |want| over the tensor) + |want|): an
# absolute part at the tensor's scale (sums cancel to values near zero) and a
# relative part. The Rust tests use the same formula and value.
TOL = 1e-5
EPS = 1e-5
MOMENTUM = 0.1


def f32_text(v):
    """The shortest decimal that reads back as the f32 `v`."""
    for digits in range(1, 10):
        s = "%.*g" % (digits, v)
        if struct.unpack("f", struct.pack("f", float(s)))[0] == v:
            return s
    raise AssertionError(v)


def inputs(t):
    """An f32 tensor as exact decimals (flattened, row-major)."""
    assert t.dtype == torch.float32
    return [float(f32_text(v)) for v in t.flatten().tolist()]


def expected(t64, t32):
    """The float64 reference (9 significant digits) and torch's f32 error."""
    want = [float("%.9g" % v) for v in t64.flatten().tolist()]
    scale = max([1.0] + [abs(v) for v in want])
    worst = 0.0
    for w, g in zip(want, t32.flatten().tolist()):
        worst = max(worst, abs(g - w) / (TOL * (scale + abs(w))))
    return want, worst


def run_both(fn, tensors):
    """`fn` on float64 and float32 copies of `tensors` (all differentiable),
    returning per precision the outputs and the inputs' gradients."""
    out = {}
    for dtype in (torch.float64, torch.float32):
        ts = [t.to(dtype).clone().requires_grad_(grad) for t, grad in tensors]
        out[dtype] = (fn(*ts), ts)
    return out


def record(case, names, pairs):
    """Adds each expected tensor and torch's f32 error to `case`."""
    errs = {}
    for name, (t64, t32) in zip(names, pairs):
        case[name], errs[name] = expected(t64.detach(), t32.detach())
    case["torch_f32_err"] = errs
    assert max(errs.values()) <= 1.0, (case["name"], errs)
    return case


def gen(seed):
    g = torch.Generator().manual_seed(seed)
    return lambda *shape, lo=-1.0, hi=1.0: lo + (hi - lo) * torch.rand(
        *shape, generator=g, dtype=torch.float32
    )


def window(kernel, stride, padding, hw, y):
    """A window's geometry and the output size torch gave."""
    return {
        "kernel": list(kernel),
        "stride": stride,
        "padding": padding,
        "input": list(hw),
        "output": list(y.shape[2:]),
    }


def conv_case(seed, name, n, ci, co, kernel, stride, padding, hw):
    r = gen(seed)
    x = r(n, ci, *hw)
    w = r(co, ci, *kernel, lo=-0.5, hi=0.5)
    y0 = F.conv2d(x, w, stride=stride, padding=padding)
    dy = r(*y0.shape)

    def fn(x, w, dy):
        y = F.conv2d(x, w, stride=stride, padding=padding)
        y.backward(dy)
        return y

    runs = run_both(fn, [(x, True), (w, True), (dy, False)])
    case = {
        "name": name,
        "n": n,
        "in_channels": ci,
        "out_channels": co,
        **window(kernel, stride, padding, hw, y0),
        "x": inputs(x),
        "w": inputs(w),
        "dy": inputs(dy),
    }
    (y64, (x64, w64, _)), (y32, (x32, w32, _)) = runs[torch.float64], runs[torch.float32]
    return record(
        case,
        ["y", "dx", "dw"],
        [(y64, y32), (x64.grad, x32.grad), (w64.grad, w32.grad)],
    )


def pool_case(seed, name, kind, n, c, kernel, stride, padding, hw, ties=False):
    r = gen(seed)
    x = r(n, c, *hw)
    if ties:
        # Five levels: most windows hold equal maxima.
        x = torch.round(x * 2.0) / 2.0
    if kind == "max":
        call = lambda x: F.max_pool2d(x, kernel, stride=stride, padding=padding)
    elif kind == "avg":
        call = lambda x: F.avg_pool2d(
            x, kernel, stride=stride, padding=padding, count_include_pad=True
        )
    else:
        assert kind == "global"
        call = lambda x: F.adaptive_avg_pool2d(x, 1)
        kernel, stride, padding = hw, 1, 0
    y0 = call(x)
    dy = r(*y0.shape)

    def fn(x, dy):
        y = call(x)
        y.backward(dy)
        return y

    runs = run_both(fn, [(x, True), (dy, False)])
    case = {
        "name": name,
        "kind": kind,
        "n": n,
        "channels": c,
        **window(kernel, stride, padding, hw, y0),
        "x": inputs(x),
        "dy": inputs(dy),
    }
    (y64, (x64, _)), (y32, (x32, _)) = runs[torch.float64], runs[torch.float32]
    return record(case, ["y", "dx"], [(y64, y32), (x64.grad, x32.grad)])


def bn_head(name, n, c, hw, x, gamma, beta):
    """The fields every batch-norm case has."""
    return {
        "name": name,
        "n": n,
        "channels": c,
        "input": list(hw),
        "x": inputs(x),
        "gamma": inputs(gamma),
        "beta": inputs(beta),
    }


def bn_train_case(seed, name, n, c, hw, offset, spread):
    r = gen(seed)
    x = r(n, c, *hw, lo=offset - spread, hi=offset + spread)
    gamma = r(c, lo=0.5, hi=1.5)
    beta = r(c, lo=-0.5, hi=0.5)
    dy = r(n, c, *hw)
    stats = {}

    def fn(x, gamma, beta, dy):
        mean = torch.zeros(c, dtype=x.dtype)
        var = torch.ones(c, dtype=x.dtype)
        y = F.relu(
            F.batch_norm(x, mean, var, gamma, beta, True, MOMENTUM, EPS)
        )
        y.backward(dy)
        stats[x.dtype] = (mean, var)
        return y

    runs = run_both(fn, [(x, True), (gamma, True), (beta, True), (dy, False)])
    case = {**bn_head(name, n, c, hw, x, gamma, beta), "dy": inputs(dy)}
    (y64, (x64, g64, b64, _)) = runs[torch.float64]
    (y32, (x32, g32, b32, _)) = runs[torch.float32]
    (m64, v64), (m32, v32) = stats[torch.float64], stats[torch.float32]
    return record(
        case,
        ["y", "dx", "dgamma", "dbeta", "running_mean", "running_var"],
        [
            (y64, y32),
            (x64.grad, x32.grad),
            (g64.grad, g32.grad),
            (b64.grad, b32.grad),
            (m64, m32),
            (v64, v32),
        ],
    )


def bn_eval_case(seed, name, n, c, hw):
    r = gen(seed)
    x = r(n, c, *hw, lo=-2.0, hi=3.0)
    gamma = r(c, lo=0.5, hi=1.5)
    beta = r(c, lo=-0.5, hi=0.5)
    mean = r(c, lo=-0.5, hi=1.0)
    var = r(c, lo=0.2, hi=2.0)

    def fn(x, gamma, beta, mean, var):
        return F.relu(F.batch_norm(x, mean, var, gamma, beta, False, MOMENTUM, EPS))

    runs = run_both(
        fn, [(x, False), (gamma, False), (beta, False), (mean, False), (var, False)]
    )
    case = {
        **bn_head(name, n, c, hw, x, gamma, beta),
        "running_mean": inputs(mean),
        "running_var": inputs(var),
    }
    return record(case, ["y"], [(runs[torch.float64][0], runs[torch.float32][0])])


def conv_cases():
    return [
        conv_case(1, "3x3 stride 1 pad 1", 2, 3, 4, (3, 3), 1, 1, (7, 6)),
        conv_case(2, "3x3 stride 2 pad 1", 1, 2, 5, (3, 3), 2, 1, (8, 8)),
        conv_case(3, "1x1", 2, 4, 3, (1, 1), 1, 0, (5, 5)),
        conv_case(4, "2x2 stride 2", 3, 3, 2, (2, 2), 2, 0, (6, 4)),
        conv_case(5, "3x2 pad 2", 1, 2, 3, (3, 2), 1, 2, (4, 5)),
        conv_case(6, "7x7 stride 2 pad 3 (stem)", 1, 3, 8, (7, 7), 2, 3, (12, 11)),
        conv_case(7, "5x5 stride 3 pad 2", 2, 1, 2, (5, 5), 3, 2, (9, 7)),
        conv_case(8, "1x1 stride 2 (projection)", 2, 6, 4, (1, 1), 2, 0, (7, 7)),
        conv_case(9, "reduction 288", 2, 32, 8, (3, 3), 1, 1, (4, 4)),
    ]


def pool_cases():
    return [
        pool_case(20, "max 2x2 stride 2", "max", 2, 3, (2, 2), 2, 0, (8, 8)),
        pool_case(21, "max 3x3 stride 2 pad 1", "max", 1, 4, (3, 3), 2, 1, (7, 6)),
        pool_case(22, "max 3x3 stride 1 pad 1 ties", "max", 2, 2, (3, 3), 1, 1, (5, 5), True),
        pool_case(23, "max 2x3 stride 1 pad 1 ties", "max", 1, 3, (2, 3), 1, 1, (4, 6), True),
        pool_case(24, "avg 2x2 stride 2", "avg", 2, 3, (2, 2), 2, 0, (6, 6)),
        pool_case(25, "avg 3x3 stride 1 pad 1", "avg", 1, 2, (3, 3), 1, 1, (5, 5)),
        pool_case(26, "avg 3x3 stride 2 pad 1", "avg", 2, 2, (3, 3), 2, 1, (7, 7)),
        pool_case(27, "avg 3x2 stride 2 pad 1", "avg", 1, 3, (3, 2), 2, 1, (6, 5)),
        pool_case(28, "global 4x4", "global", 3, 5, None, None, None, (4, 4)),
        pool_case(29, "global 7x5", "global", 2, 3, None, None, None, (7, 5)),
    ]


def bn_cases():
    train = [
        bn_train_case(40, "3x4x5x5", 3, 4, (5, 5), 0.5, 2.5),
        bn_train_case(41, "2x3x7x5", 2, 3, (7, 5), 0.0, 1.0),
        bn_train_case(42, "1x5x3x3", 1, 5, (3, 3), 0.0, 1.0),
        bn_train_case(43, "4x8x4x4", 4, 8, (4, 4), -0.3, 0.7),
        # Variance near eps: eps changes the output by about 4%.
        bn_train_case(45, "variance 1e-4", 2, 3, (4, 4), 0.0, 0.02),
    ]
    # Means 7 and 28 standard deviations from zero: a variance taken as
    # E[x^2] - E[x]^2 in f32 loses the bits torch's two passes keep.
    large_mean = [
        bn_train_case(44, "offset mean 4", 2, 3, (6, 6), 4.0, 1.0),
        bn_train_case(47, "offset mean 16", 2, 3, (6, 6), 16.0, 1.0),
    ]
    evals = [bn_eval_case(50, "2x3x2x3", 2, 3, (2, 3))]
    return train, large_mean, evals


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "sim/tests/data/torch")
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    head = {"torch": torch.__version__, "generator": "tools/torch_vectors.py", "tol": TOL}
    train, large_mean, evals = bn_cases()
    files = {
        "conv2d.json": {**head, "cases": conv_cases()},
        "pool2d.json": {**head, "cases": pool_cases()},
        "batch_norm2d.json": {
            **head,
            "eps": EPS,
            "momentum": MOMENTUM,
            "train": train,
            "train_large_mean": large_mean,
            "eval": evals,
        },
    }
    for name, body in files.items():
        path = out / name
        path.write_text(json.dumps(body, separators=(",", ":")) + "\n")
        print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
