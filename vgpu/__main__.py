"""``python3 -m vgpu``: the same as the ``vgpu`` console script."""
import sys

from vgpu.cli import main

sys.exit(main())
