"""``python -m mrvl_convert.cli``: the same as ``mrvl-convert``."""
import sys

from mrvl_convert.cli import main

sys.exit(main())
