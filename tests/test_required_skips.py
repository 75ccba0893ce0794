"""`skip_unless_required`: a test skips for a missing capability only where `$DRGRPO_REQUIRE` does not demand it."""

from __future__ import annotations

import pytest
from conftest import REQUIRE_ENV, skip_unless_required


def test_a_missing_capability_skips_with_its_reason(monkeypatch):
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no namespaces on this kernel"):
        skip_unless_required("namespaces", "no namespaces on this kernel")


@pytest.mark.parametrize("required", ["namespaces", "pypi, namespaces", "all"])
def test_a_required_capability_fails_instead_of_skipping(monkeypatch, required):
    monkeypatch.setenv(REQUIRE_ENV, required)
    with pytest.raises(pytest.fail.Exception, match="no namespaces on this kernel; DRGRPO_REQUIRE=.* 'namespaces'"):
        skip_unless_required("namespaces", "no namespaces on this kernel")


def test_another_requirement_still_skips(monkeypatch):
    monkeypatch.setenv(REQUIRE_ENV, "pypi")
    with pytest.raises(pytest.skip.Exception):
        skip_unless_required("namespaces", "no namespaces on this kernel")
