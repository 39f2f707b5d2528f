"""``python -m bench.figures [--check]``: write (or check) every page's figure blocks."""

import sys

from bench.figures.pages import main

sys.exit(main())
