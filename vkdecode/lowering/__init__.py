"""Lowering: a region or an op of the decode Program -> KernelCalls (shader, defines, spec
constants, bindings, grid), chosen per device by KernelCaps (caps.py).

    regions.py    region -> calls; KERNELS: rule name -> fused kernel builder
    calls.py      KernelCall, Binding and the shared launch-shape helpers
    ops.py        one op -> its own kernel (the unfused path, and any region without a fused kernel)
    matvec.py     fused projections (norm + matvec, GLU epilogue, residual add, lm_head + argmax)
    attention.py  fused RoPE + KV write + attention, add + norm
    norm_pre.py   a residual add that pre-computes the next norm for its consumers
    rows.py       prompt-chunk kernels (T rows); matmul_rows.py their matmuls (narrow, wide,
                  tiled), coop.py their tensor-core shapes
"""
