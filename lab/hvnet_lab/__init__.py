"""hvnet's lab: reproductions of the published studies (docs/references.md).

It stands on its own: its host helpers (`lab/hvlab.py`) live beside it, and
the system tests import them from here, not the reverse."""
