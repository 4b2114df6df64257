"""Shared fixtures: one Vulkan device per session, and a zero-validation-errors check after each test."""

from __future__ import annotations

import os

import pytest

# `tests.helpers` importable under a bare `pytest` as well as `python -m pytest`

_DEVICE = None


@pytest.fixture(scope="session")
def device():
    """The session's Device (validation on when VKDECODE_VALIDATE=1, as `make test` sets it).

    Without any Vulkan device the GPU tests skip, except under VKDECODE_VALIDATE=1 (CI), where a
    missing lavapipe is a broken setup and must fail loudly.
    """
    global _DEVICE
    from vkdecode.errors import NoDeviceError
    from vkdecode.vk import Device

    try:
        dev = Device()
    except NoDeviceError as e:
        if os.environ.get("VKDECODE_VALIDATE") == "1":
            raise
        pytest.skip(f"no Vulkan device: {e}")
    # errors of the device's own creation (a feature struct the layer rejects): each test clears
    # the list before it runs, so they are checked here or never
    created = list(dev.validation_errors)
    if created:
        dev.close()
        pytest.fail("validation errors while creating the session device:\n" + "\n".join(created))
    _DEVICE = dev
    yield dev
    _DEVICE = None
    errors = list(dev.validation_errors)
    dev.close()
    assert not errors, "validation errors while closing the session device:\n" + "\n".join(errors)


@pytest.fixture(autouse=True)
def _no_validation_errors():
    """Fail the test that produced validation-layer errors (each test starts with an empty list)."""
    if _DEVICE is not None:
        _DEVICE.validation_errors.clear()
    yield
    if _DEVICE is not None and _DEVICE.validation_errors:
        msgs = list(_DEVICE.validation_errors)
        _DEVICE.validation_errors.clear()
        pytest.fail(f"{len(msgs)} Vulkan validation error(s):\n" + "\n".join(msgs), pytrace=False)


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory):
    """A session-wide directory of tiny random models (built once, reused by every test)."""
    from tests.helpers.make_models import models_dir as _models_dir

    return _models_dir(tmp_path_factory)


@pytest.fixture(scope="module", autouse=True)
def _give_memory_back():
    """After each test module: free what its fixtures held and the session device's pipelines
    (lavapipe's compiled code: ~1 GB more per module family otherwise), so the suite's peak memory
    is near the largest module's, not the sum of all of them. (No malloc_trim: handing the heap
    back makes the next module's RSS climb as it re-grows, which the soak test reads as a leak.)"""
    yield
    import gc

    gc.collect()
    if _DEVICE is not None:  # the module's executors are closed: its pipelines may go
        _DEVICE.release_pipelines()
