"""The running process: wiring, threads, publishing, commands, heartbeat, systemd, HA.

Imports run one way: ``agent.commands`` -> ``agent.service`` -> the stages
(``capture``, ``detect``, ``objects``, ``mqtt``, ``update``) -> base modules (``settings``,
``messages``, ``errors``, ``log``); tests/test_quality.py checks every arrow.
"""
