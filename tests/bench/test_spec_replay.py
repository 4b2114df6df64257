"""bench/spec_replay.py's replay: the counts a speculative run would make on given greedy tokens."""

from bench.spec_replay import replay


def test_a_copied_prompt_is_drafted_and_accepted():
    prompt = list(range(100, 140))
    gen = [100, 101] + list(range(102, 140))  # the model copies its prompt from the start
    r = replay(prompt, gen, k=8, max_burst=1, round_trip=0.7, verify=2.5)
    assert r["tokens"] == len(gen) - 1
    # the first look has one token of context (no 2-gram match yet): one draftless step, then
    # every draft accepted whole, 9 tokens a verify: 38 tokens in 4 x 9 + the last 2
    assert r["draftless_tokens"] == 1
    assert r["verify_steps"] == 5 and r["accepted"] == 4 * 8 + 2 and r["drafted"] == 5 * 8
    assert r["speedup_model"] > 2.0


def test_draftless_text_runs_growing_bursts():
    prompt = [1, 2, 3]
    gen = list(range(200, 260))  # nothing repeats: never a draft
    one = replay(prompt, gen, k=8, max_burst=1, round_trip=0.7, verify=2.5)
    burst = replay(prompt, gen, k=8, max_burst=8, round_trip=0.7, verify=2.5)
    assert one["verify_steps"] == burst["verify_steps"] == 0
    assert one["draftless_tokens"] == burst["draftless_tokens"] == len(gen) - 1
    assert one["draftless_turns"] == len(gen) - 1
    assert burst["draftless_turns"] == 4 + -(-(len(gen) - 1 - 15) // 8)  # 1, 2, 4, 8, then 8 each
    assert one["speedup_model"] < burst["speedup_model"] <= 1.0
