"""Objects over time, per camera: tracker, masks, zones, lines and the event lifecycle.

Pure and I/O-free: each piece keeps its state in plain fields, is fed one frame's results at
a time and returns what to publish; ``agent.service`` does the publishing and persistence.
"""
