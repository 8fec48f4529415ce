"""The Textual frontend: a thin view over the core (session, telemetry, LiveRun)."""
