"""``python -m tether``: the ``tether`` command line (:func:`._cli._main.main`), run as a
module.
Layer: the command line (``_cli``).
"""

import sys

from ._cli._main import main

sys.exit(main())
