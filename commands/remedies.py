"""`cleanrl-plus remedies`: the agent × plasticity-remedy applicability matrix, printed from plasticity/catalogue.py."""

from __future__ import annotations

from envs.errors import UserError
from plasticity.catalogue import matrix


def parse(argv: list[str]) -> bool:
    """`cleanrl-plus remedies` takes no flags but --help; True when help was asked for."""
    if argv and argv[0] in ("-h", "--help"):
        return True
    if argv:
        raise UserError(f"cleanrl-plus remedies takes no arguments, got {' '.join(argv)}")
    return False


def main(argv: list[str]) -> None:
    """Print the matrix."""
    if parse(argv):
        print("usage: cleanrl-plus remedies   (prints the agent × remedy applicability matrix, from plasticity/catalogue.py)")
        return
    print(matrix(), end="")
