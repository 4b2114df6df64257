"""The IR's words, below ir.py and verify.py: the step-buffer layout, value kinds, weight dtypes and
block sizes, and IRError."""

from __future__ import annotations

# Words of the step buffer. The host writes TOKEN and POS before a step; nothing else in the
# recorded step changes between tokens.
STEP_TOKEN = 0
STEP_POS = 1
STEP_SEED = 2  # sampling RNG seed (u32); the counter is the position
STEP_TEMP = 3  # sampling temperature (f32 bits); written once per generation
STEP_TOP_K = 4  # u32, 0 = no top-k cut
STEP_TOP_P = 5  # f32 bits, 1.0 = no top-p cut
# batched decode (fusion/chunk_batch.py): each row of the batch step buffer is a step buffer of
# its own, plus the KV slot it reads and writes and whether the GPU advances it after the step
STEP_SLOT = 6
STEP_LIVE = 7  # 1: the row is fed its own next token; 0: a padding row, left as it is
# (a prompt chunk's single record: its rows that are prompt tokens, 0 all; the recurrent ops step
# their state through those only, so a chunk may be padded: executors/prefill.py)
STEP_WORDS = 8

VALUE_KINDS = ("weight", "activation", "state", "step", "output")
WEIGHT_DTYPES = (
    "f32",
    "f16",
    "q8_0",
    "q4_0",
    "q4_1",
    "q5_0",
    "q5_1",
    "iq4_nl",
    "mxfp4",
    "q4_k",
    "q5_k",
    "q6_k",
    "q2_k",
    "q3_k",
)
QUANT_BLOCK = 32  # elements per block of the q* / iq* / mxfp4 dtypes, except the K-quants:
K_QUANT_BLOCK = 256  # q2_k .. q6_k superblocks


class IRError(ValueError):
    """A malformed Program; the message names the op (`op #12 rms_norm: ...`) or the value."""
