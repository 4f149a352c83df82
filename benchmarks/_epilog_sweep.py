"""The sweep of ``bench_matmul_epilog.py --sweep``: Python epilogs on products drawn at random, against cuBLAS
(``torch.matmul``) followed by the same epilog written as torch operations.

The products (:func:`products`, seeded: ``--list`` prints them without a GPU): the issue's six measured cases first,
then 40 drawn with M, N, K log-uniform in [1, 16384] (two in three made odd in all three, so more than half of all
products are not multiples of 8; the others rounded to multiples of 64), a quarter of them batched (2 to 16),
dtypes float16, bfloat16, float32, float64 and complex64 in turn, and the epilogs defined for the dtype in turn
(every other batched product scales each batch). Sizes
are capped so that each product's GEMM takes at most a few milliseconds on an H200 (2^40 flops for 16-bit, 2^37 for
float32 and float64, 2^35 for complex64, and 2^27 elements per matrix): the whole sweep's GPU time stays under about
a minute, and the first run's compiles (about ten kernel configurations, a second or two each once the skeletons
are on disk; 10-20 s per skeleton the very first time) bring it to about 3 minutes.

Epilogs (mathpy function / torch unfused); the issue's cases use its own two, ``gelu_tanh(value + bias[col])`` /
``F.gelu(d + bias, approximate="tanh")`` and ``0.5 value + residual[row, col]`` / ``0.5 * d + residual``:

- bias by row ``value + bias[row]`` / ``d + bias[:, None]``; bias by column ``value + bias[col]`` / ``d + bias``;
- residual tile ``value + residual[row, col]`` / ``d + residual``;
- gated SiLU ``value / (1 + exp(-value)) * gate[row, col]`` / ``F.silu(d) * gate``;
- clamp ``min(max(value * scale[row], -4), 4)`` / ``(d * scale[:, None]).clamp_(-4, 4)``;
- per-batch scale ``value * scale[batch]`` / ``d * scale[:, None, None]`` (batched products only).

Every operand has the result's dtype (the scales of a complex product are real float32), so both sides compute in
it. Each mathpy result is compared with the unfused torch result before anything is timed.
"""

import math

import numpy as np

__all__ = ["products", "EPILOGS", "run_product", "sweep_table", "sweep_plot", "SEED"]

SEED = 24
DTYPES = ("float16", "bfloat16", "float32", "float64", "complex64")
_FLOP_CAP = {"float16": 2 ** 40, "bfloat16": 2 ** 40, "float32": 2 ** 37, "float64": 2 ** 37, "complex64": 2 ** 35}
_ELEMENTS_CAP = 2 ** 27
CLAMP = 4.0
# the issue's table: (batch, m, n, k, dtype, epilog)
ISSUE_CASES = [(1, 4096, 4096, 4096, "float16", "gelu_bias"), (1, 4096, 4096, 4096, "float16", "half_residual"),
               (1, 5000, 3000, 2000, "bfloat16", "gelu_bias"), (1, 5000, 3000, 2000, "bfloat16", "half_residual"),
               (8, 2048, 2048, 2048, "bfloat16", "batch_scale"), (1, 2048, 2048, 2048, "float32", "gelu_bias")]


def bias_row(value, row, col, bias):
    return value + bias[row]


def bias_col(value, row, col, bias):
    return value + bias[col]


def residual(value, row, col, residual):
    return value + residual[row, col]


def residual_batched(value, batch, row, col, residual):
    return value + residual[batch, row, col]


def gelu_bias(value, row, col, bias):
    x = value + bias[col]
    inner = np.float32(0.7978845608) * (x + np.float32(0.044715) * x * x * x)
    return np.float32(0.5) * x * (np.float32(1) + math.tanh(inner))


def half_residual(value, row, col, residual):
    return np.float32(0.5) * value + residual[row, col]


def gated_silu(value, row, col, gate):
    return value / (np.float32(1) + math.exp(-value)) * gate[row, col]


def clamp(value, row, col, scale):
    return min(max(value * scale[row], np.float32(-CLAMP)), np.float32(CLAMP))


def batch_scale(value, batch, row, col, scale):
    return value * scale[batch]


EPILOGS = ("bias_row", "bias_col", "residual", "gated_silu", "clamp", "batch_scale")
_COMPLEX = ("bias_row", "bias_col", "residual", "batch_scale")  # min / max / exp are not defined for complex


def _draw(rng, odd, batch, dtype):
    sizes = [max(1, int(2 ** rng.uniform(0, 14))) for _ in range(3)]
    sizes = [s - 1 + s % 2 for s in sizes] if odd else [max(64, s // 64 * 64) for s in sizes]
    while True:  # cap the work and the memory: halve the largest size until it fits
        m, n, k = sizes
        flops = 2 * m * n * k * batch * (4 if dtype == "complex64" else 1)
        if flops <= _FLOP_CAP[dtype] and max(m * n, m * k, k * n) * batch <= _ELEMENTS_CAP:
            return m, n, k
        i = int(np.argmax(sizes))
        sizes[i] = (max(1, sizes[i] // 2) | 1) if odd else max(64, sizes[i] // 128 * 64)


def products(count=40, seed=SEED):
    """The issue's cases, then ``count`` drawn ones: ``(batch, m, n, k, dtype, epilog)``."""
    rng = np.random.default_rng(seed)
    out = list(ISSUE_CASES)
    for i in range(count):
        dtype = DTYPES[i % len(DTYPES)]
        batch = int(rng.integers(2, 17)) if i % 4 == 3 else 1
        names = [e for e in EPILOGS[:-1] if dtype != "complex64" or e in _COMPLEX]
        epilog = "batch_scale" if batch > 1 and (i // 4) % 2 == 0 else names[(i + i // len(DTYPES)) % len(names)]
        out.append((batch, *_draw(rng, i % 3 != 2, batch, dtype), dtype, epilog))
    return out


def _operands(torch, epilog, batch, m, n, dtype, generator):
    """(mathpy function, epilog_inputs, torch epilog) of one product."""
    F = torch.nn.functional
    real = torch.float32 if dtype == torch.complex64 else dtype

    def randn(*shape, kind=dtype):
        return torch.randn(*shape, device="cuda", generator=generator).to(kind)

    if epilog == "bias_row":
        bias = randn(m)
        return bias_row, {"bias": bias}, lambda d: d + bias[:, None]
    if epilog == "bias_col":
        bias = randn(n)
        return bias_col, {"bias": bias}, lambda d: d + bias
    if epilog == "residual":
        r = randn(batch, m, n) if batch > 1 else randn(m, n)
        return (residual_batched if batch > 1 else residual), {"residual": r}, lambda d: d + r
    if epilog == "gelu_bias":
        bias = randn(n)
        return gelu_bias, {"bias": bias}, lambda d: F.gelu(d + bias, approximate="tanh")
    if epilog == "half_residual":
        r = randn(m, n)
        return half_residual, {"residual": r}, lambda d: 0.5 * d + r
    if epilog == "gated_silu":
        gate = randn(m, n)
        return gated_silu, {"gate": gate}, lambda d: F.silu(d) * gate
    if epilog == "clamp":
        scale = (torch.rand(m, device="cuda", generator=generator) * 2).to(real)
        return clamp, {"scale": scale}, lambda d: (d * scale[:, None]).clamp_(-CLAMP, CLAMP)
    scale = randn(batch, kind=real)
    return batch_scale, {"scale": scale}, lambda d: d * scale[:, None, None]


_TOLERANCE = {"float16": 1e-2, "bfloat16": 3e-2, "float32": 1e-4, "float64": 1e-10, "complex64": 1e-4}


def run_product(case, index, torch, mathpy, gpu_ms, rel_err):
    """Time one product: unfused (torch.matmul + torch ops), mathpy's stateless call and its planned execute."""
    batch, m, n, k, dtype_name, epilog = case
    dtype = getattr(torch, dtype_name)
    g = torch.Generator(device="cuda").manual_seed(index)
    shape = (batch,) if batch > 1 else ()
    a = (torch.randn(*shape, m, k, device="cuda", generator=g) / math.sqrt(k)).to(dtype)
    b = torch.randn(*shape, k, n, device="cuda", generator=g).to(dtype)
    fn, inputs, torch_epilog = _operands(torch, epilog, batch, m, n, dtype, g)
    ref = torch_epilog(torch.matmul(a, b))
    got = mathpy.matmul(a, b, epilog=fn, epilog_inputs=inputs)
    err = rel_err(got, ref)
    row = {"index": index, "batch": batch, "m": m, "n": n, "k": k, "dtype": dtype_name, "epilog": epilog,
           "error": err, "correct": bool(err <= _TOLERANCE[dtype_name])}
    with mathpy.Matmul(a, b) as mm:
        mm.plan(epilog=fn, epilog_inputs=inputs)
        row["route"] = mm.prepared_call.problem.fused.route.name
        row["unfused_ms"] = gpu_ms(lambda: torch_epilog(torch.matmul(a, b)))
        row["mathpy_ms"] = gpu_ms(lambda: mathpy.matmul(a, b, epilog=fn, epilog_inputs=inputs))
        row["planned_ms"] = gpu_ms(mm.execute)
    row["speedup"] = row["unfused_ms"] / row["mathpy_ms"]
    row["speedup_planned"] = row["unfused_ms"] / row["planned_ms"]
    return row


def _geomean(values):
    values = [v for v in values if v == v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def sweep_table(rows):
    """The table, the geometric means per dtype and overall, and the products where mathpy is slower."""
    lines = ["|  # | dtype | batch x M x N x K | epilog | route | unfused ms | mathpy ms | planned ms | "
             "unfused / mathpy | unfused / planned | error |", "|" + "---|" * 11]
    for r in rows:
        size = f"{r['batch']} x {r['m']} x {r['n']} x {r['k']}"
        lines.append(f"| {r['index']:2d} | {r['dtype']} | {size} | {r['epilog']} | {r['route']} | "
                     f"{r['unfused_ms']:.4f} | {r['mathpy_ms']:.4f} | {r['planned_ms']:.4f} | {r['speedup']:.2f} | "
                     f"{r['speedup_planned']:.2f} | {r['error']:.1e}{'' if r['correct'] else ' WRONG'} |")
    lines += ["", "| dtype | products | geomean unfused / mathpy | geomean unfused / planned | min unfused / mathpy |",
              "|---|---|---|---|---|"]
    for dtype in (*DTYPES, "16-bit", "all"):
        group = [r for r in rows if dtype == "all" or r["dtype"] == dtype
                 or (dtype == "16-bit" and r["dtype"] in ("float16", "bfloat16"))]
        if group:
            lines.append(f"| {dtype} | {len(group)} | {_geomean([r['speedup'] for r in group]):.2f} | "
                         f"{_geomean([r['speedup_planned'] for r in group]):.2f} | "
                         f"{min(r['speedup'] for r in group):.2f} |")
    slower = [r["index"] for r in rows if r["speedup"] < 1.0]
    lines.append(f"\nproducts where mathpy's stateless call is slower than the unfused pair: {slower or 'none'}")
    return "\n".join(lines)


def sweep_plot(rows, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return
    colors = {"library": "tab:green", "fused": "tab:blue", "elementwise": "tab:orange", "generic": "tab:gray"}
    order = sorted(rows, key=lambda r: 2 * r["batch"] * r["m"] * r["n"] * r["k"])
    fig, ax = plt.subplots(figsize=(max(8, 0.28 * len(rows)), 4.5))
    for i, r in enumerate(order):
        ax.bar(i, r["speedup"], color=colors.get(r["route"], "k"))
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(order)), [f"{r['dtype'][:4]} {r['epilog'][:6]}" for r in order], rotation=90,
                  fontsize=6)
    ax.set_ylabel("unfused / mathpy (stateless)")
    ax.set_yscale("log")
    for route, color in colors.items():
        ax.bar(0, 0, color=color, label=route)
    ax.legend(fontsize=7)
    ax.set_title(title + " (products by increasing flops)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
