"""Which snapshot this is: the quickstart prints it so a run shows its code's identity."""

MARKER = "argus-quickstart-v1"
