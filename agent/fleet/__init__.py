"""Fleet operations: the status table, staged rollouts and the operator's MQTT session.

The CLI (agent/commands/fleet.py, push_model.py, rollback.py, config_set.py) parses and
prints; this package never imports it.
"""
