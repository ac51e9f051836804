# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures of the pytest suite: the p2pt package under test (the
installed one, else python/ of this source tree) and the source root."""
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

try:
    import p2pt  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "python"))


@pytest.fixture
def root():
    return ROOT
