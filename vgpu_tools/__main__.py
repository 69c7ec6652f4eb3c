"""``python3 -m vgpu_tools``: the same as the ``vgpu`` console script."""
import sys

from vgpu_tools.cli import main

sys.exit(main())
