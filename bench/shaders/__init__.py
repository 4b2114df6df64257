"""Probe shaders of the benchmarks (never shipped): Device.pipeline takes them by path."""

from pathlib import Path

DIR = Path(__file__).resolve().parent


def path(name: str) -> str:
    return str(DIR / f"{name}.comp")


def timed_dispatch(
    dev, pipe, buffers: list, groups: tuple, reps: int, inner: int = 8, warm_s: float = 0.3
) -> float:
    """Median µs of one dispatch of pipe over buffers (bindings 0, 1, ...) and groups: each timed
    submit runs `inner` dispatches (compute barriers between) between two timestamps. First the
    GPU is kept busy for warm_s with untimed submits: an idle H200 timed at its idle clocks gave
    7x lower rates in one process than in the call before (2026-11-27-coop2). The buffers stay
    the caller's."""
    import statistics
    import time

    from vkdecode.vk.descriptors import write_descriptor_set

    pool = dev.descriptor_pool(1, len(buffers))
    dset = pool.allocate(pipe)
    write_descriptor_set(dev, dset, [(b, 0, b.size) for b in buffers])
    ts = dev.timestamp_pool(2)
    cmd = dev.command_buffer()
    cmd.begin(one_time=False)
    ts.reset_cmd(cmd)
    cmd.timestamp(ts, 0)
    cmd.bind(pipe, dset)
    for i in range(inner):
        if i:
            cmd.compute_barrier()
        cmd.dispatch(*groups)
    cmd.timestamp(ts, 1)
    cmd.end()
    t_end = time.perf_counter() + warm_s
    while True:
        dev.submit([cmd])
        ts.read_ns()
        if time.perf_counter() >= t_end:
            break
    times = []
    for _ in range(reps):
        dev.submit([cmd])
        t = ts.read_ns()
        times.append((t[1] - t[0]) / 1e3 / inner)
    for o in (cmd, ts, pool):
        o.close()
    return statistics.median(times)
