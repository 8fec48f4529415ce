import sys

from ddptop.cli import main

sys.exit(main())
