"""perfcast: performance prediction and configuration for deep-learning jobs on GPU clusters."""

__version__ = "0.1.0"

import os as _os

# OpenMP threads that spin while idle steal the other core from LightGBM and torch on small
# machines (fits ran ~6x slower here); a passive wait policy costs nothing on big ones.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
