"""Annotated images of what the stages found: boxes, labels, skeletons, zones and lines.

Above ``detect`` and ``objects`` (it draws their results), below its users ``service``
(snapshots) and ``commands`` (``--draw``); the stages never import it.
"""
