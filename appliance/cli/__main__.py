"""``python -m appliance.cli ...``: the puffer-bench CLI where the console script is not installed."""

import sys

from appliance.cli import main

if __name__ == "__main__":
    sys.argv[0] = "puffer-bench"
    main()
