"""The k loop of the block GEMM's generated code (:mod:`._matmul`), one generator per engine: CUDA cores (scalar, and
fp32 16-byte vector tiles), tensor cores (``mma.sync`` on fragments loaded with ``ldmatrix`` or scalar shared loads)
and fp64 tensor cores. Each appends the lines of ``c{e} += a[row, p] * b[p, col]`` over the thread's accumulators
``c0, c1, ...`` (owned as :func:`._matmul.accumulator_owners` says) to a kernel body; :func:`kloop` picks one and puts the
intrinsics it calls into the generated code's namespace.
"""

__all__ = ["kloop"]


def kloop(d, owners, to_c, ns, simulator):
    """The k-loop generator ``f(lines)`` for description ``d`` (``owners``: the accumulators' (row, column)
    expressions; ``to_c``: the format of a storage value read in the compute type); the intrinsics it uses are added to
    namespace ``ns``. Under numba's simulator: the scalar loop (it has no warp-level instructions)."""
    loops = _KLoops(d, owners, to_c)
    if d.tensor_cores and not simulator and d.precision == "float64":
        from . import _intrinsics

        ns["DMMA"] = _intrinsics.mma_f64
        return loops.dmma
    if d.vector_tiles and not simulator:
        from . import _intrinsics

        ns["V4"] = _intrinsics.load4_f32_shared
        return loops.vector
    if d.tensor_cores and not simulator:
        from . import _intrinsics

        ns["PAIR"], ns["PACK"] = _intrinsics.pair_u32, _intrinsics.pack2_u32
        ns["MMA"] = _intrinsics.mma_f16_f32 if d.precision == "float16" else _intrinsics.mma_bf16_f32
        ns.update(LDSM4=_intrinsics.ldmatrix(4, False), LDSM4T=_intrinsics.ldmatrix(4, True),
                  LDSM2T=_intrinsics.ldmatrix(2, True), ALIGNED16=_intrinsics.aligned16)
        return loops.ldsm
    return loops.scalar


class _KLoops:
    def __init__(self, d, owners, to_c):
        self.d, self.owners, self.to_c = d, owners, to_c
        self.a_row_major = d.a_arrangement == "row_major"

    def a_elem(self, row, p):
        lda = self.d.lda
        return f"({row}) * {lda} + {p}" if self.a_row_major else f"({p}) * {lda} + {row}"

    def scalar(self, lines):
        """CUDA cores (and the simulator's stand-in for the tensor cores): acc += a[row, p] * b[p, col]."""
        owners, to_c, ldb = self.owners, self.to_c, self.d.ldb
        rows = list(dict.fromkeys(r for r, _ in owners))
        cols = list(dict.fromkeys(c for _, c in owners))
        lines.append(f"    for p in range({self.d.k}):")
        for i, r in enumerate(rows):
            a_ref = "a[" + self.a_elem(r, "p") + "]"
            lines.append(f"        a{i} = {to_c.format(a_ref)}")
        for j, c in enumerate(cols):
            lines.append(f"        b{j} = {to_c.format(f'b[p * {ldb} + {c}]')}")
        for e, (r, c) in enumerate(owners):
            lines.append(f"        c{e} = c{e} + a{rows.index(r)} * b{cols.index(c)}")

    def _mma_products(self, lines, pad):
        FM, FN = self.d.warp_tile_m // 16, self.d.warp_tile_n // 8
        for fm in range(FM):
            for fn in range(FN):
                e = (fm * FN + fn) * 4
                cs = ", ".join(f"c{e + q}" for q in range(4))
                fa = ", ".join(f"fa{fm}_{r}" for r in range(4))
                lines.append(f"{pad}{cs} = MMA({fa}, fb{fn}_0, fb{fn}_1, {cs})")

    def mma(self, lines, pad="    "):
        """Tensor cores: per k-step of 16, load the warp's A and B fragments from shared memory with scalar loads
        (a 16-bit pair per register; B two 16-bit loads) and run mma.sync.m16n8k16 on every (A, B) fragment pair.
        The path for operands whose shared arrays are not 16-byte aligned (ldmatrix needs it)."""
        d, ldb = self.d, self.d.ldb
        FM, FN = d.warp_tile_m // 16, d.warp_tile_n // 8
        lines.append(f"{pad}for kk in range({d.k // 16}):")
        lines.append(f"{pad}    k0 = kk * 16 + tk")
        for fm in range(FM):
            # registers: (row g, k 2t..2t+1), (row g+8, k 2t..), (row g, k 2t+8..), (row g+8, k 2t+8..)
            for reg, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
                row, p = f"arow + {fm * 16 + dr}", f"k0 + {dk}"
                if self.a_row_major:
                    lines.append(f"{pad}    fa{fm}_{reg} = PAIR(a, {self.a_elem(row, p)})")
                else:
                    lines.append(f"{pad}    fa{fm}_{reg} = PACK(a, {self.a_elem(row, p)}, "
                                 f"{self.a_elem(row, p + ' + 1')})")
        for fn in range(FN):
            for reg, dk in enumerate((0, 8)):
                idx = f"(k0 + {dk}) * {ldb} + bcol + {fn * 8}"
                lines.append(f"{pad}    fb{fn}_{reg} = PACK(b, {idx}, {idx} + {ldb})")
        self._mma_products(lines, pad + "    ")

    def ldsm(self, lines):
        """Tensor cores with ldmatrix: per k-step of 16, one ``ldmatrix.x4`` per 16 x 16 A fragment (``.trans`` for
        the col-major arrangement) and one ``ldmatrix.x4.trans`` per two 16 x 8 B fragments, instead of 4 and 8
        scalar shared loads; the padded leading dimensions (multiples of 8 values, 16 bytes more than a row) keep
        every 8-row matrix in distinct banks. Needs 16-byte aligned shared arrays (checked per call; else the scalar
        path)."""
        d, lda, ldb = self.d, self.d.lda, self.d.ldb
        FM, FN = d.warp_tile_m // 16, d.warp_tile_n // 8
        WTM, WTN, WN = d.warp_tile_m, d.warp_tile_n, d.warp_n
        lines += [f"    lrow = (warp // {WN}) * {WTM} + lane % 16",   # A row-major: the row this lane addresses
                  "    lk8 = (lane // 16) * 8",
                  "    tka = lane % 8 + (lane // 16) * 8",            # A col-major: the k row this lane addresses
                  f"    mrow = (warp // {WN}) * {WTM} + ((lane // 8) % 2) * 8",
                  "    tkb = lane % 8 + ((lane // 8) % 2) * 8",       # B: the k row and column this lane addresses
                  f"    ncol = (warp % {WN}) * {WTN} + (lane // 16) * 8",
                  "    if ALIGNED16(a) and ALIGNED16(b):"]
        lines.append(f"        for kk in range({d.k // 16}):")
        lines.append("            k0 = kk * 16")
        for fm in range(FM):
            regs = ", ".join(f"fa{fm}_{r}" for r in range(4))
            if self.a_row_major:  # lanes 0-15: rows 0-15 at k0, lanes 16-31: the same rows at k0 + 8
                lines.append(f"            {regs} = LDSM4(a, (lrow + {fm * 16}) * {lda} + k0 + lk8)")
            else:  # stored k-major: lanes give k rows; matrices (m 0-7 | 8-15) x (k 0-7 | 8-15)
                lines.append(f"            {regs} = LDSM4T(a, (k0 + tka) * {lda} + mrow + {fm * 16})")
        for fn in range(0, FN, 2):  # matrices (k 0-7 | 8-15) of columns fn * 8.. and (fn + 1) * 8..
            idx = f"(k0 + tkb) * {ldb} + ncol + {fn * 8}"
            if fn + 1 < FN:
                lines.append(f"            fb{fn}_0, fb{fn}_1, fb{fn + 1}_0, fb{fn + 1}_1 = LDSM4T(b, {idx})")
            else:
                lines.append(f"            fb{fn}_0, fb{fn}_1 = LDSM2T(b, {idx})")
        self._mma_products(lines, "            ")
        lines.append("    else:")
        self.mma(lines, "        ")

    def dmma(self, lines):
        """fp64 tensor cores: per k-step of 4, one double of A per 8-row fragment (row g, k t), one of B per 8-column
        fragment (k t, column g), and mma.sync.m8n8k4.f64 on every pair."""
        d = self.d
        FM, FN = d.warp_tile_m // 8, d.warp_tile_n // 8
        lines.append(f"    for kk in range({d.k // 4}):")
        lines.append("        k0 = kk * 4 + tk")
        for fm in range(FM):
            lines.append(f"        fa{fm} = a[{self.a_elem(f'arow + {fm * 8}', 'k0')}]")
        for fn in range(FN):
            lines.append(f"        fb{fn} = b[k0 * {d.ldb} + bcol + {fn * 8}]")
        for fm in range(FM):
            for fn in range(FN):
                e = (fm * FN + fn) * 2
                lines.append(f"        c{e}, c{e + 1} = DMMA(fa{fm}, fb{fn}, c{e}, c{e + 1})")

    def vector(self, lines):
        """fp32 vector tiles: per 4 k and group of 4 owned rows, one 16-byte read of each row (its 4 k), then per k
        one 16-byte read of each owned group of 4 B columns (6 shared loads per k for an 8 x 8 tile, instead of 16;
        a group at a time keeps the registers under the two-blocks-per-SM budget)."""
        owners, lda, ldb = self.owners, self.d.lda, self.d.ldb
        rows = list(dict.fromkeys(r for r, _ in owners))
        cols = list(dict.fromkeys(c for _, c in owners))
        lines.append(f"    for p4 in range({self.d.k // 4}):")
        lines.append("        p = p4 * 4")
        for g0 in range(0, len(rows), 4):
            for i in range(g0, g0 + 4):
                lines.append(f"        a{i} = V4(a, ({rows[i]}) * {lda} + p)")
            for q in range(4):
                for j in range(0, len(cols), 4):
                    lines.append(f"        b{j // 4} = V4(b, (p + {q}) * {ldb} + {cols[j]})")
                for e, (r, c) in enumerate(owners):
                    i = rows.index(r)
                    if g0 <= i < g0 + 4:
                        j = cols.index(c)
                        lines.append(f"        c{e} = c{e} + a{i}[{q}] * b{j // 4}[{j % 4}]")
