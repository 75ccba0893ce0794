"""Compatibility name: the recipe planner now lives in the `drgrpo.planning` package (one module per check).

`from drgrpo.planner import plan_recipe` keeps working; new code imports from `drgrpo.planning`. The star import
re-exports exactly `drgrpo.planning.__all__`, so a name added there is never missing here.
"""

from drgrpo.planning import *  # noqa: F403
from drgrpo.planning import __all__  # noqa: F401
