"""The agent's error hierarchy.

Every error a user can cause is an ``AgentError`` subclass whose message is one actionable
line; the CLI prints it and exits with ``exit_code``. Library errors are wrapped with
``raise ... from e`` so the cause stays in the traceback for debugging.
"""

from __future__ import annotations


class AgentError(Exception):
    """Base class: a failure with a one-line, actionable message."""

    exit_code = 1
    code = "error"


class ConfigError(AgentError):
    """The configuration file or an environment override is invalid."""

    exit_code = 2
    code = "bad_config"


class SourceError(AgentError):
    """A camera or media source cannot be opened or read."""

    exit_code = 3
    code = "source_error"


class ModelError(AgentError):
    """A model file is missing, malformed, or does not match what it claims to be."""

    exit_code = 4
    code = "bad_model"


class ProviderError(AgentError):
    """No execution provider could create an inference session."""

    exit_code = 5
    code = "provider_error"


class BrokerError(AgentError):
    """The MQTT broker cannot be reached or refused the connection."""

    exit_code = 6
    code = "broker_error"


class CommandError(AgentError):
    """A remote command was malformed or could not be carried out."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class VerifyError(CommandError):
    """A model update failed one step of the protocol; ``code`` names the step.

    The codes are a public API (docs/model-updates.md): operators script against them.
    """
