"""The host's mirror of a batch's sequences (executors/batch.py): a live row, a joining prompt,
and a row moved on by the token its step chose."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass
class Joining:
    """A prompt on its way into `slot`: the pieces of its prompt not run yet (Decoder.prompt_pieces)."""

    slot: int
    ids: list  # the prompt: its KV rows are copied into the slot, its length is the first position
    params: object  # its SamplingParams
    pieces: deque
    left: int | None  # as Row.left, once it has joined
    cached: int = 0  # leading prompt tokens whose rows were reused (not run)


@dataclass
class Row:
    """One live sequence as the host mirrors it: the token its next step is fed, at `pos`."""

    token: int
    pos: int
    params: object  # its SamplingParams (step words STEP_SEED .. STEP_TOP_P)
    ids: list  # the tokens whose K/V rows its slot holds, rows 0..pos-1
    left: int | None = None  # decode steps it runs at most (None: to the end of the context)
    kept: bool = True  # its rows are known to hold ids: its slot may cache them when it leaves


def stepped(row: Row, tok: int) -> int:
    """The row after a step fed its token: the token's K/V row at row.pos is written now."""
    row.ids.append(row.token)
    row.token, row.pos = tok, row.pos + 1
    if row.left is not None:
        row.left -= 1
    return tok
