"""Remote model updates (model-update protocol v1): transfer, verify, persist, swap, roll back.

Nothing here talks MQTT: ``UpdateManager`` takes callbacks, the command router feeds it.
"""
