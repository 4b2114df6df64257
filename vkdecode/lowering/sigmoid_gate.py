"""MATMUL_SIGMOID_SCALE_ADD and SIGMOID_SCALE_MATMUL_ADD -> kernel calls: a sigmoid gate, the
matvec and the residual add as matmul_add.comp's calls (row chunks included) with the gate bound
after y. SIGMOID_OUT: a gated shared expert's down, its one-float gate logit read in the epilogue;
SIGMOID_X: Qwen3.5's attention output, gated element by element as x is loaded.

Their calls stay matmul_add calls, so the peephole that lets a matmul_add also write the next norm's
inputs (norm_pre.py) applies to them: the next norm folds into the matvecs after it.
"""

from __future__ import annotations

from dataclasses import replace

from fusion.ir import Program
from fusion.region import Region
from vkdecode.lowering.calls import Binding, KernelCall, KernelCaps
from vkdecode.lowering.matvec import matmul_add


def _gated(define: str):
    def build(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall]:
        r = region.roles
        plain = replace(region, roles={k: r[k] for k in ("weight", "x", "residual", "out")})
        return [
            replace(c, bindings=c.bindings + (Binding(r["gate"]),), defines=c.defines + ((define, "1"),))
            for c in matmul_add(p, plain, caps)
        ]

    return build


matmul_sigmoid_scale_add = _gated("SIGMOID_OUT")
sigmoid_scale_matmul_add = _gated("SIGMOID_X")
