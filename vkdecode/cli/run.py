"""`vkdecode run`: stream a completion to stdout, then a run summary to stderr (or one JSON object)."""

from __future__ import annotations

import argparse
import json
import sys

from vkdecode.cli.options import (
    add_model_options,
    add_reasoning_format_option,
    add_sampling_options,
    decode_options,
    sampling_kwargs,
)
from vkdecode.errors import VkDecodeError
from vkdecode.options import check_text
from vkdecode.reasoning import resolve

DEFAULT_CHAT = "What is the capital of France?"


def add_run_parser(sub) -> None:
    from vkdecode.executors import MODES

    p = sub.add_parser("run", help="generate text with a model, streaming it as it decodes")
    add_model_options(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--prompt", default=None, help="raw text prompt (no chat template)")
    g.add_argument(
        "--chat",
        default=None,
        help=f"user message, wrapped in the model's chat template (default: {DEFAULT_CHAT!r})",
    )
    p.add_argument("--max-tokens", type=int, default=256, help="tokens to generate at most (default 256)")
    p.add_argument(
        "--mode",
        default="fused",
        choices=MODES,
        help="fused replay (default), replay without fusion, or unfused (re-recorded per token)",
    )
    p.add_argument(
        "--tokens-per-submit",
        type=int,
        default=1,
        metavar="K",
        help="fused mode: record K steps per command buffer, one submit and one readback per "
        "K tokens (faster on GPUs where the submit gap shows; tokens stream K at a time)",
    )
    add_sampling_options(p)
    p.add_argument(
        "--prefill",
        default="auto",
        metavar="WIDTHS",
        help="prompt chunk widths, comma separated (e.g. 128,32,8), 'auto' for the device's "
        "default, 'off' for token-by-token prompt processing",
    )
    p.add_argument(
        "--speculative",
        type=int,
        default=0,
        metavar="K",
        help="greedy speculative decoding: K prompt-lookup draft tokens checked per step "
        "(best on text that repeats its prompt: code edits, summaries; 0 = off)",
    )
    # show by default, as llama.cpp's CLI does: a long think is visible work, not a silent wait; on
    # stderr, so stdout (a pipe, a script) gets the answer alone
    p.add_argument(
        "--reasoning",
        default="show",
        choices=("show", "hide", "raw"),
        help="a reasoning model's thinking (gpt-oss, Qwen3): show it on stderr apart from the answer "
        "on stdout (default), hide it, or raw: the model's text as it comes, markers and all",
    )
    add_reasoning_format_option(p, none=False)
    p.add_argument("--json", action="store_true", help="print one JSON object (text + summary) at the end")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar while weights upload (default: when stderr is a terminal)",
    )
    p.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    import vkdecode
    from vkdecode.default_model import resolve_model

    if args.max_tokens < 1:
        raise VkDecodeError("--max-tokens must be at least 1")
    check_text("--prompt", args.prompt)  # argv bytes that are not UTF-8: refused before loading
    check_text("--chat", args.chat)
    sampling = sampling_kwargs(args)  # refuse bad flags before loading anything
    options = decode_options(args, sampling=bool(sampling))
    path = resolve_model(args.model)
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    # Greedy loads the step that ends in argmax (fused into the lm_head); only sampling needs the sampler.
    with vkdecode.load(path, device=args.device, options=options, progress=progress) as model:
        prompt, chat = args.prompt, args.chat
        if prompt is None and chat is None:
            chat = DEFAULT_CHAT
        fmt = "none" if args.reasoning == "raw" else args.reasoning_format
        split = resolve(fmt, model.reasoning_format if chat is not None else None)  # as the API's
        parts, thought, tokens, last = [], [], [], None
        echo = ReasoningEcho(sys.stderr if args.reasoning == "show" and not args.json else None)
        try:
            gen = model.stream_generate(
                prompt=prompt, chat=chat, max_tokens=args.max_tokens, reasoning_format=fmt, **sampling
            )
            for r in gen:
                parts.append(r.content)  # the raw text where nothing is split
                thought.append(r.reasoning)
                tokens.append(r.token)
                last = r
                echo.write(r.reasoning)
                if not args.json and r.content:
                    echo.end()
                    sys.stdout.write(r.content)
                    sys.stdout.flush()
        except KeyboardInterrupt:
            print("\n[interrupted]", file=sys.stderr)
            return 130
        echo.end()
        model.device.check_validation()  # only ever non-empty under VKDECODE_VALIDATE=1
        device = model.device.info.name
        text = "".join(parts)
        summary = dict(
            last.stats, device=device, finish_reason=last.finish_reason, sampling=sampling or {"temp": 0.0}
        )
        if model.decoder.speculative is not None:
            summary["speculative"] = dict(model.decoder.speculative.stats.as_dict(), k=args.speculative)
        if args.json:
            print(
                json.dumps(
                    {
                        "text": text,
                        **({"reasoning": "".join(thought)} if split and args.reasoning == "show" else {}),
                        "tokens": tokens,
                        "finish_reason": last.finish_reason,
                        "model": path,
                        "device": device,
                        "summary": summary,
                    },
                    indent=2,
                )
            )
        else:
            if not text.endswith("\n"):
                sys.stdout.write("\n")
            sys.stdout.flush()
            print(format_summary(summary), file=sys.stderr)
    return 0


class ReasoningEcho:
    """--reasoning show: the reasoning on stderr as it streams (faint on a terminal), then a line
    break before the answer starts, so the two read apart. stream None: shows nothing."""

    def __init__(self, stream):
        self.stream, self.last = stream, ""
        self.faint = stream is not None and stream.isatty()

    def write(self, text: str) -> None:
        if self.stream is None or not text:
            return
        self.stream.write(f"\033[2m{text}\033[0m" if self.faint else text)
        self.stream.flush()
        self.last = text

    def end(self) -> None:
        if self.last and not self.last.endswith("\n"):
            self.stream.write("\n")
            self.stream.flush()
        self.last = ""


def format_summary(s: dict) -> str:
    c, e = s.get("host_calls_per_token", {}), s.get("executed_per_token", {})
    return "\n".join(
        [
            f"-- {s['prompt_tokens']} prompt tokens, {s['generated_tokens']} generated ({s['finish_reason']})",
            f"   load {s['load_s']:.2f} s, time to first token {s['ttft_s']:.2f} s, {s['decode_tok_s']:.1f} tok/s",
            (
                f"   host {s['host_us_per_token']:.0f} µs/token, GPU {s['gpu_us_per_token']:.0f} µs/token, "
                f"wall {s['wall_us_per_token']:.0f} µs/token"
            ),
            (
                f"   mode {s['mode']} on {s['device']}: per token the GPU executes {e.get('dispatches', 0)} dispatches; "
                f"the host makes {c.get('descriptor_writes', 0)} descriptor writes, "
                f"{c.get('command_buffer_recordings', 0)} recordings, {c.get('submits', 0)} submit(s)"
            ),
        ]
        + (
            [
                (
                    f"   speculative K={sp['k']}: {sp['accepted']}/{sp['drafted']} drafts accepted "
                    f"({100 * sp['acceptance_rate']:.0f}%), {sp['tokens_per_verify']:.2f} tokens per verify step, "
                    f"{sp['plain_steps']} plain steps"
                )
            ]
            if (sp := s.get("speculative"))
            else []
        )
    )
