"""GGUF files of Qwen3.5 (llama.cpp arch `qwen35`), Qwen3.5-MoE (`qwen35moe`) and Qwen3-Next
(`qwen3next`), read into the programs qwen35.py builds: the metadata as llama.cpp's loader reads it,
and the inverse of each transform its converter (conversion/qwen.py) applied:

- every RMSNorm but the linear layers' gated one holds 1 + w already (the program's value: the HF
  path adds the 1 at load, this one adds nothing);
- ssm_a holds A = -exp(A_log); the program's gated_delta_step reads A_log, so log(-A) at load;
- ssm_conv1d is (channels, kernel) (the HF (channels, 1, kernel) squeezed): flattened the same;
- Qwen3.5's V heads (the V rows of attn_qkv and of the conv, attn_gate, ssm_beta / ssm_alpha,
  ssm_a, ssm_dt and ssm_out's columns) are "tiled" (V head j of key head g at j * hk + g, for
  ggml's broadcast) where HF groups them (at g * r + j). They are kept as stored and the program's
  gated_delta_step told so (attr v_tiled: V head h reads key head h % hk): the other linear-layer
  ops do not care which order the heads come in, and a column reorder of ssm_out would have
  dequantized it to f32. Qwen3-Next's converter does not reorder: its attn_qkv /
  attn_gate hold in_proj_qkvz regrouped (every q, every k, every v grouped, then z), as the program
  reads them, and its ssm_ba is HF's in_proj_ba (per key head [b (r), a (r)]), regrouped here;
- attn_q keeps HF's per-head [q, gate] rows; q and k rows (and their norms) get the partial rotary
  permutation of qwen35.rotary_order (passed in: qwen35.py imports this module), as on the HF path (llama.cpp's NEOX / IMROPE rotate HF's pairs).

The multi-token prediction layers (nextn_predict_layers, appended to block_count) are not read,
as llama.cpp's decode step does not run them.
"""

from __future__ import annotations

import numpy as np

from vkdecode.errors import ModelError
from vkdecode.models import moe
from vkdecode.models.arch import GgufView

LINEAR, FULL = "linear_attention", "full_attention"  # the layer types (qwen35.py)
# the GGUF keys config_audit refuses that the MoE forms read (Architecture.gguf_implemented)
IMPLEMENTED = frozenset({"expert_count", "expert_used_count", "rope.dimension_count"})


def interval_types(n: int, interval: int) -> tuple[str, ...]:
    """full_attention_interval's layer types (HF's and llama.cpp's when no list is given)."""
    return tuple(FULL if (i + 1) % interval == 0 else LINEAR for i in range(n))


def text_fields(key, n_layers: int, hidden: int, heads: int, tiled: bool = True) -> dict:
    """The fields qwen35 / qwen35moe / qwen3next metadata share (llama.cpp's load_arch_hparams)."""
    nextn = int(key("nextn_predict_layers", 0))
    if not 0 <= nextn < n_layers:
        raise ModelError(f"key 'nextn_predict_layers' = {nextn} must be below block_count {n_layers}")
    n = n_layers - nextn  # the prediction layers come last; the decode step runs the others
    recurrent = key("attention.recurrent_layers", ())
    if recurrent:
        if len(recurrent) < n:
            raise ModelError(f"key 'attention.recurrent_layers' lists {len(recurrent)} of {n} layers")
        types = tuple(LINEAR if bool(r) else FULL for r in recurrent[:n])
    else:
        interval = int(key("full_attention_interval", 4))
        if interval < 1:
            raise ModelError(f"key 'full_attention_interval' = {interval} must be positive")
        types = interval_types(n, interval)
    head_dim = int(key("attention.key_length", hidden // heads))
    rotary = int(key("rope.dimension_count", head_dim))  # llama.cpp's n_rot default: head_dim
    if not (0 < rotary <= head_dim and rotary % 2 == 0):
        raise ModelError(f"key 'rope.dimension_count' = {rotary} does not fit head_dim {head_dim}")
    kind = key("rope.scaling.type", "none")
    if kind != "none" or float(key("rope.scaling.factor", 1.0)) not in (0.0, 1.0):
        raise ModelError(f"rope scaling {kind!r} (key 'rope.scaling.type' / '.factor') is not supported here")
    hk, hv = int(key("ssm.group_count")), int(key("ssm.time_step_rank"))
    dk, kk, inner = int(key("ssm.state_size")), int(key("ssm.conv_kernel")), int(key("ssm.inner_size"))
    if not (hk and hv and hv % hk == 0 and inner % hv == 0 and kk >= 2):
        raise ModelError(
            f"linear attention keys ssm.group_count {hk}, ssm.time_step_rank {hv}, ssm.inner_size "
            f"{inner}, ssm.conv_kernel {kk} are not supported"
        )
    if tiled and inner != hv * dk:  # llama.cpp's qwen35 takes head_v_dim = ssm.state_size
        raise ModelError(f"key 'ssm.inner_size' = {inner} must be ssm.time_step_rank x ssm.state_size")
    # text positions are the same in every MRoPE section: rope.dimension_sections changes nothing
    return {
        "n_layers": n,
        "v_heads_tiled": tiled,
        "layer_types": types,
        "rotary_dim": rotary,
        "linear_attn": (hk, hv, dk, inner // hv, kk),
    }


def moe_fields(key, n_layers: int, hidden: int, heads: int) -> dict:
    """Experts in every layer (llama.cpp's qwen35moe / qwen3next have no dense FFN), the top-k
    weights always renormalised (their build_moe_ffn calls pass norm_w = true, whatever
    expert_weights_norm says), a shared expert gated by sigmoid(ffn_gate_inp_shexp . h)."""
    experts = moe.gguf_fields(key, n_layers, hidden, heads, norm=True, shared=True)
    return {
        **experts,
        "norm_topk_prob": True,
        "intermediate_size": int(key("feed_forward_length", experts["expert_ffn"])),
    }


def a_log(a: np.ndarray) -> np.ndarray:
    """ssm_a (A = -exp(A_log)) -> A_log, what the program's gated_delta_step reads."""
    if not np.all(a < 0):
        raise ModelError("tensor ssm_a must be negative (the converter writes -exp(A_log))")
    return np.log(-a)


def views(args, tiled: bool, order: np.ndarray) -> dict:
    """The GgufViews of this model's tensors (tiled: Qwen3.5's V-head order, kept as stored: the
    program's gated_delta_step reads it (v_heads_tiled); else Qwen3-Next's fused ssm_ba);
    order: qwen35.rotary_order's head dims."""
    h, d, kvh, hid = args.n_heads, args.head_dim, args.n_kv_heads, args.hidden_size
    hk, hv, dk, dv, kk = args.linear_attn
    c = 2 * hk * dk + hv * dv
    out = {
        "wq": GgufView((2 * h * d, hid), (np.arange(h)[:, None] * 2 * d + order).reshape(-1)),
        "wgate": GgufView((2 * h * d, hid), (np.arange(h)[:, None] * 2 * d + d + np.arange(d)).reshape(-1)),
        "wk": GgufView((kvh * d, hid), (np.arange(kvh)[:, None] * d + order).reshape(-1)),
        "q_norm": GgufView((d,), order),
        "k_norm": GgufView((d,), order),
        "lin_conv": GgufView((c, kk), None, lambda a: a.reshape(-1)),
        "lin_a_log": GgufView((hv,), None, a_log),
    }
    if tiled:
        return out
    r = hv // hk  # ssm_ba: per key head [b (r), a (r)]
    group = np.arange(hk)[:, None] * 2 * r + np.arange(r)
    return {
        **out,
        "lin_b": GgufView((2 * hv, hid), group.reshape(-1)),
        "lin_a": GgufView((2 * hv, hid), (group + r).reshape(-1)),
    }
