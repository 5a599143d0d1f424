"""Fleet operations: the status table and staged rollouts (pure logic; the CLI is
agent/commands/fleet.py)."""
