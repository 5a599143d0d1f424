"""OpenCV, typed as Any.

OpenCV's bundled stubs declare array arguments as ``Sequence[...]``, which fights numpy
under ``mypy --strict``; importing cv2 through this module keeps the rest strictly typed.
"""

from typing import Any

import cv2 as _cv2

cv2: Any = _cv2
