"""How long a Python matmul epilog takes before its first result: cold, warm in the process, warm from the disk cache.

Each scenario runs in a fresh Python process (what a user's new script is) with its own mathpy cache folder:

1. **cold**: an empty cache: the kernel's skeleton is compiled (numba-cuda), the epilog is compiled, nvJitLink links
   them, the driver loads the cubin;
2. **new epilog**: the same cache, a function never seen before: the skeleton comes from disk, only the epilog is
   compiled and linked (the common case: a user writes a new epilog);
3. **from disk**: the same function again in a new process: the linked cubin comes from disk (no numba-cuda import);
4. **warm in process**: within process 3, a second call (the stateless memo) and a new ``Matmul`` plan.

Routes: ``fused`` (bf16 4096 x 4096 x 1024: whole tiles, the Hopper kernel), ``elementwise`` (float32 1000 x 999 x
512: cuBLASLt + the pass), ``library`` (float32, ``max(x + bias[col], 0)``: cuBLASLt's RELU_BIAS, nothing compiled).
Each line gives the first call's seconds (result synchronised) and where they went: skeleton compile, epilog compile,
link, the rest (planning, loading, the product itself).

Usage: ``PYTHONPATH=. python benchmarks/bench_epilog_compile.py`` on a GPU (about 1-2 minutes: each cold scenario
compiles a skeleton); ``--no-gpu`` times the same compile and link steps without a GPU (no load, no run).
Targets (issue 24): first call with a new epilog within 5 s, from disk under 0.5 s.
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# {name} is formatted in: each scenario's function is another one when its name differs
_CHILD = textwrap.dedent('''
    import json, math, sys, time
    t0 = time.perf_counter()
    import numpy as np
    import mathpy
    from mathpy.host.matmul import _fused_kernels as K
    from mathpy.jit import _epilog_wrapper as W
    from mathpy.jit import _link
    spent = {{"skeleton": 0.0, "epilog": 0.0, "link": 0.0}}

    def timed(owner, attr, key):
        inner = getattr(owner, attr)
        def run(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - start
        setattr(owner, attr, run)

    timed(K.Build, "compile", "skeleton")
    timed(W, "_compile", "epilog")
    timed(_link, "link", "link")
    imported = time.perf_counter() - t0
    SCALE = np.float32({scale})

    def {name}(value, row, col, gate):
        return value / (np.float32(1) + math.exp(-value)) * gate[row, col] * SCALE

    def relu_bias(value, row, col, bias):
        return max(value + bias[col], np.float32(0))

    route, gpu = {route!r}, {gpu!r}
    if gpu:
        import torch
        dtype = torch.bfloat16 if route == "fused" else torch.float32
        m, n, k = (4096, 4096, 1024) if route == "fused" else (1000, 999, 512)
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        if route == "library":
            fn, inputs = relu_bias, {{"bias": torch.randn(n, device="cuda", dtype=dtype)}}
        else:
            fn, inputs = {name}, {{"gate": torch.randn(m, n, device="cuda", dtype=dtype)}}
        torch.cuda.synchronize()

        def call():
            start = time.perf_counter()
            mathpy.matmul(a, b, epilog=fn, epilog_inputs=inputs)
            torch.cuda.synchronize()
            return time.perf_counter() - start

        first = call()
        second = call()
        start = time.perf_counter()
        with mathpy.Matmul(a, b) as mm:
            mm.plan(epilog=fn, epilog_inputs=inputs)
            chosen = mm.prepared_call.problem.fused.route.name
            mm.execute()
        torch.cuda.synchronize()
        plan = time.perf_counter() - start
    else:  # the compile and link steps only
        from mathpy.device import _epilog_pass as P, _gemm_hopper as HK
        from mathpy.jit._matmul_epilog import as_matmul_epilog
        epilog = as_matmul_epilog({name}, ("gate",))
        if route == "fused":
            config = HK.HopperConfig("bfloat16", "bfloat16", bn=256, stages=3, b_mn_major=True, epilog=True,
                                     operands=1, edges=False, stage_data=True, store_tile=True)
            build, kinds, staged = K.Build("hopper", config, (9, 0)), (("bfloat16", 2),), (128, 256)
        else:
            build, kinds, staged = K.Build("pass", P.PassConfig("float32", 1), (9, 0)), (("float32", 2),), None
        start = time.perf_counter()
        K.linked(build, epilog, kinds, staged, K.cubin_key(build, epilog, kinds, staged))
        first, second, plan, chosen = time.perf_counter() - start, float("nan"), float("nan"), route
    print(json.dumps({{"import": imported, "first": first, "second": second, "plan": plan, "route": chosen,
                      "numba": "numba" in sys.modules, **spent}}))
''')


def child(cache, route, name, scale, gpu):
    env = dict(os.environ, MATHPY_CACHE_DIR=cache)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    source = _CHILD.format(route=route, name=name, scale=scale, gpu=gpu)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        sys.exit(f"bench_epilog_compile: the {route} child failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process"] = time.perf_counter() - start
    return result


def table(rows):
    """The Markdown table docs/benchmarks.md shows: ``rows`` of (route, scenario, timings)."""
    lines = ["| route | scenario | first call s | skeleton s | epilog s | link s | second call ms | new plan ms | "
             "import s |", "|---|---|---|---|---|---|---|---|---|"]
    for route, scenario, r in rows:
        lines.append(f"| {route} | {scenario} | {r['first']:.3f} | {r['skeleton']:.2f} | {r['epilog']:.2f} | "
                     f"{r['link']:.2f} | {1e3 * r['second']:.2f} | {1e3 * r['plan']:.2f} | {r['import']:.2f} |")
    return "\n".join(lines)


def main():
    gpu = "--no-gpu" not in sys.argv
    routes = ("fused", "elementwise", "library") if gpu else ("fused", "elementwise")
    rows = []
    for route in routes:
        with tempfile.TemporaryDirectory() as cache:
            for scenario, name, scale in (("cold", "epilog_a", 1), ("new epilog", "epilog_b", 2),
                                          ("from disk", "epilog_b", 2)):
                r = child(cache, route, name, scale, gpu)
                rows.append((route, scenario, r))
                print(f"  {route:11} {scenario:10}: first call {r['first']:7.3f} s (skeleton {r['skeleton']:.2f}, "
                      f"epilog {r['epilog']:.2f}, link {r['link']:.2f}), numba imported: {r['numba']}", flush=True)
    print("\n" + table(rows))
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "benchmarks", "results", "bench_epilog_compile.json"), "w") as f:
        json.dump([{"route": r, "scenario": s, **v} for r, s, v in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
