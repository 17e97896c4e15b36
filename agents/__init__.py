"""Single-file agents: each module reads top to bottom like its paper's algorithm box (`python agents/td3.py --help`)."""
