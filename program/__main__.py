import sys

from program.entry.cli import main

sys.exit(main())
