"""Where to look: motion on a downscaled frame, and the regions the detector runs on.

Pure per-camera state (no I/O): ``MotionDetector`` finds what moved, ``RegionPlanner``
turns motion, tracked objects and a slow sweep of the frame into a few squares to run the
detector on, and ``merge_regions`` puts the detections of those squares back together in
source-image pixels. See docs/regions.md.
"""
