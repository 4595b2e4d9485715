"""The conformance suite on the local (subprocess) backend."""

from __future__ import annotations

import pytest

from tests.sandbox.conformance import SandboxConformance


class TestLocalConformance(SandboxConformance):
    @pytest.fixture(scope="class")
    def backend_name(self) -> str:
        return "local"
