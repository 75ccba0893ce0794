"""`skip_unless_required`: a test skips for a missing capability only where `$DRGRPO_REQUIRE` does not demand it."""

from __future__ import annotations

import pytest
from conftest import CAPABILITIES, REQUIRE_ENV, ROOT, skip_unless_required


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


@pytest.mark.parametrize("requirement, reason", [("namespace", "no namespaces"), ("namespaces", " ")])
def test_a_misspelt_capability_or_an_empty_reason_fails_instead_of_skipping(monkeypatch, requirement, reason):
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.fail.Exception, match="name one of"):
        skip_unless_required(requirement, reason)


def test_a_misspelt_requirement_in_the_environment_fails(monkeypatch):
    monkeypatch.setenv(REQUIRE_ENV, "namespace")
    with pytest.raises(pytest.fail.Exception, match="names no capability namespace"):
        skip_unless_required("namespaces", "no namespaces on this kernel")


def test_every_capability_the_tests_skip_for_is_known():
    import re

    named = set()
    for path in (ROOT / "tests").glob("*.py"):
        named |= set(re.findall(r'skip_unless_required\(\s*"(\w+)"', path.read_text()))
    assert named and named <= CAPABILITIES, sorted(named - CAPABILITIES)
