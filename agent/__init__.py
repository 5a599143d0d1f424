"""edge-vision-agent: camera frames in, YOLO detections out over MQTT."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("edge-vision-agent")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+src"

__all__ = ["__version__"]
