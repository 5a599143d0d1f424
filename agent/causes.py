"""Why a source does not stream: the one word of the camera status ``reason``.

The words are a public contract (docs/mqtt.md "Camera status reasons"). ``cause_of_line``
finds the cause a native library line names (FFmpeg's ``401``), for the log's ``cause``.
"""

from __future__ import annotations

import re
from typing import Final

#: The contract's reasons (docs/mqtt.md "Camera status reasons").
UNAUTHORIZED: Final = "unauthorized"
NOT_FOUND: Final = "not_found"
REFUSED: Final = "refused"
TIMEOUT: Final = "timeout"
NO_STREAM: Final = "no_stream"
NO_DEVICE: Final = "no_device"
ENDED: Final = "ended"
FROZEN: Final = "frozen"
UNSUPPORTED: Final = "unsupported"
STOPPED: Final = "stopped"
ERROR: Final = "error"

_LINE_CAUSES = (
    (re.compile(r"\b40[13]\b|Unauthori[sz]ed|Forbidden", re.I), UNAUTHORIZED),
    (re.compile(r"\b404\b|Not Found|No such file or directory", re.I), NOT_FOUND),
    (re.compile(r"Connection refused", re.I), REFUSED),
    (re.compile(r"timed? ?out", re.I), TIMEOUT),
    (re.compile(r"No such device|can't open camera by index", re.I), NO_DEVICE),
    (re.compile(r"Invalid data found|could not find codec|no video stream", re.I), NO_STREAM),
)


def cause_of_line(line: str) -> str | None:
    """The cause a native line names (``method DESCRIBE failed: 401``: unauthorized)."""
    for pattern, cause in _LINE_CAUSES:
        if pattern.search(line):
            return cause
    return None
