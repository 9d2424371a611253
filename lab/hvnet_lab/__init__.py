"""hvnet's lab: reproductions of the published studies in shared/seeds."""

import sys
from pathlib import Path

# The namespace helpers shared with the system tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "py"))
