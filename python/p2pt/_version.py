# SPDX-License-Identifier: Apache-2.0
"""__version__: the P2PT_VERSION_* lines of include/p2pt.h, written into the
package by the build (_build_version.py), or read from the header itself
when the package is used from a source tree."""
import os
import re


def _from_header():
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include",
                          "p2pt.h")
    try:
        with open(header, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    parts = [re.search(rf"^#define P2PT_VERSION_{p} +(\d+) *$", text, re.M)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None


try:
    from ._build_version import version as __version__
except ImportError:
    __version__ = _from_header() or "unknown"
