"""Where to look: motion on a downscaled frame, and the regions the detector runs on.

Pure per-camera state (no I/O): ``MotionDetector`` finds what moved, ``RegionPlanner``
turns motion, tracked objects and a slow sweep of the frame into a few regions to run the
detector on, ``pack`` puts them side by side into few model inputs, and ``merge_regions``
puts the detections of those regions back together in source-image pixels. See
docs/regions.md.
"""
