"""Probe shaders of the benchmarks (never shipped): Device.pipeline takes them by path."""

from pathlib import Path

DIR = Path(__file__).resolve().parent


def path(name: str) -> str:
    return str(DIR / f"{name}.comp")


def timed_dispatch(dev, pipe, buffers: list, groups: tuple, reps: int) -> float:
    """Median µs (timestamps) of one dispatch of pipe over buffers (bindings 0, 1, ...) and groups,
    after one untimed submit (a cold start); the buffers stay the caller's."""
    import statistics

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
    cmd.dispatch(*groups)
    cmd.timestamp(ts, 1)
    cmd.end()
    times = []
    for _ in range(reps + 1):
        dev.submit([cmd])
        t = ts.read_ns()
        times.append((t[1] - t[0]) / 1e3)
    for o in (cmd, ts, pool):
        o.close()
    return statistics.median(times[1:])
