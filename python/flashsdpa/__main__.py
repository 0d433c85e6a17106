# __main__.py: `python -m flashsdpa ...` runs the command line of cli.py.
import sys

from flashsdpa.cli import main

if __name__ == "__main__":
    sys.exit(main())
