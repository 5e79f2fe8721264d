import sys

from playground.cli.run import main

sys.exit(main())
