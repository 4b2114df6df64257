"""fused_prefetch: which weights an attention dispatch prefetches, and how its call changes
(no GPU; the kernels run in tests/test_fused_kernels.py::test_fused_attention_prefetch)."""
from dataclasses import replace

from fusion.ir import Program
from vkdecode import fused_prefetch as fp
from vkdecode.kernels import Binding, KernelCall, KernelCaps

MIB = 1 << 20
CAPS = KernelCaps(subgroup_size=32, subgroup_arithmetic=True, max_storage_range=1 << 32,
                  max_invocations=1024, max_shared=49152, min_align=64)


def _program() -> Program:
    p = Program("t")
    p.value("wo", (1024, 2048), "f16", "weight")      # 4 MiB
    p.value("wg", (3072, 1024), "f16", "weight")      # 6 MiB
    p.value("wq8", (3072, 1024), "q8_0", "weight")    # q 3 MiB + s 0.375 MiB
    p.value("small", (64, 64), "f32", "weight")       # 16 KiB
    p.value("x", (2048,), "f32")
    p.value("y", (1024,), "f32")
    return p


def _att(label="att") -> KernelCall:
    return KernelCall("rope_kv_write_attention_sg", (512,), (Binding("x"), Binding("y")), (1,), (2, 16, 1),
                      label=label)


def _mv(*weights, shader="matmul_add") -> KernelCall:
    b = tuple(Binding(w, part) for w, part in weights) + (Binding("x"), Binding("y"))
    return KernelCall(shader, (256,), b, (len(b) - 1,), (512, 1, 1))


def test_upcoming_weights_in_order_within_budget():
    p = _program()
    calls = [_att(), _mv(("wo", "data")), _mv(("wg", "data")), _att("next"), _mv(("wq8", "q"))]
    got = fp.upcoming_weights(p, calls, 1, 8 * MIB)
    # all of wo, then wg cut at the budget; never past the next attention
    assert [(b.value, n * fp.SECTOR) for b, n in got] == [("wo", 4 * MIB), ("wg", 4 * MIB)]
    assert fp.upcoming_weights(p, calls, 1, 64 * MIB)[-1] == (Binding("wg"), 6 * MIB // fp.SECTOR)


def test_upcoming_weights_skips_small_and_repeated_and_stops_at_max_buffers():
    p = _program()
    calls = [_att(), _mv(("small", "data")), _mv(("wq8", "q"), ("wq8", "s")), _mv(("wq8", "q"), ("wq8", "s"))]
    got = fp.upcoming_weights(p, calls, 1, 64 * MIB)
    # the q8_0 scales (0.375 MiB) and the 16 KiB weight are below MIN_WEIGHT_BYTES; q once
    assert [b for b, _ in got] == [Binding("wq8", "q")]
    many = [_att()] + [_mv(("wo", "data")) if i % 2 else _mv(("wg", "data")) for i in range(4)]
    many += [KernelCall("matmul_add", (256,), (Binding("wo", "data", 0, r),), (), (1, 1, 1)) for r in range(600, 608)]
    p.values["wo"] = replace(p.values["wo"], shape=(1 << 16, 2048))   # 600+ rows of 4 KiB: each >= 2 MiB
    assert len(fp.upcoming_weights(p, many, 1, 1 << 40)) == fp.MAX_BUFFERS


def test_with_prefetch_appends_grid_rows_bindings_and_sink():
    att = _att()
    targets = [(Binding("wo"), 100), (Binding("wg"), 7)]
    c = fp.with_prefetch(att, targets, groups=5)
    assert c.groups == (2, 16 + 3, 1)          # ceil(5 / 2) rows of 2 workgroups
    d = dict(c.defines)
    assert (d["PF_N"], d["PF_G"], d["PF_B0"], d["PF_W0"], d["PF_B1"], d["PF_W1"], d["PF_SINK"]) == \
        ("2", "6", "2", "100", "3", "7", "4")
    assert c.bindings[2:] == (Binding("wo"), Binding("wg"), Binding(fp.SINK))
    assert c.writes == (1, 4) and (fp.SINK, 16) in c.scratch


def test_add_prefetch_budget_from_caps():
    p = _program()
    calls = [_att(), _mv(("wo", "data")), _att(), _mv(("wg", "data"))]
    owners = [0, 1, 2, 3]
    assert fp.add_prefetch(p, calls, owners, CAPS)[0] == calls   # 0: the default budget, none
    out, own = fp.add_prefetch(p, calls, owners, replace(CAPS, prefetch_bytes=8 << 20))
    assert own == owners and len(out) == len(calls)
    assert [c.label for c in out] == ["att+prefetch", "", "att+prefetch", ""]
    assert out[1] is calls[1]
    off, _ = fp.add_prefetch(p, calls, owners, replace(CAPS, prefetch_bytes=-1))
    assert off == calls
    g, _ = fp.add_prefetch(p, calls, owners, replace(CAPS, prefetch_bytes=8 << 20, prefetch_groups=64))
    assert g[0].groups == (2, 16 + 32, 1)


def test_cpu_devices_do_not_prefetch():
    from types import SimpleNamespace
    info = SimpleNamespace(
        device_type="cpu",
        features={"subgroup_size": 8, "subgroup_arithmetic": True, "min_subgroup_size": 8, "max_subgroup_size": 8},
        limits={"max_storage_buffer_range": 1 << 27, "max_workgroup_invocations": 1024,
                "max_shared_memory": 32768, "min_storage_buffer_offset_alignment": 16})
    assert fp.budget(KernelCaps.from_info(info)) == 0
    assert fp.budget(KernelCaps.from_info(info, prefetch_bytes=4096)) == 4096
