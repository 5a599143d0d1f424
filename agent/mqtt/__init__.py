"""MQTT layer: topics, payloads, the on-disk spool and the paho publisher."""
