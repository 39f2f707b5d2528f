import sys

from qkviz.cli import main

sys.exit(main())
