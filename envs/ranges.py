"""The ranges numeric flags may take: `Range` and the named ranges every settings dataclass declares its numbers with
(cleanrl_plus/ranges.py checks them); every layer imports these names from here.

    gamma: Fraction = 0.99                                    # in [0, 1]
    anchor_decay: Annotated[float, Range(gt=0, le=1)] = 0.5   # anything else: a Range of its own
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

SEED_MAX = 2**32 - 1  # numpy's global generator (np.random.seed) and RandomState take seeds in [0, 2**32 - 1]


@dataclasses.dataclass(frozen=True)
class Range:
    """The closed (ge, le) or open (gt, lt) bounds of a number; none given: any finite number."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def __contains__(self, value: float) -> bool:
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.lt is None or value < self.lt)
        )

    def __str__(self) -> str:
        low = f"[{_number(self.ge)}" if self.ge is not None else (f"({_number(self.gt)}" if self.gt is not None else None)
        high = f"{_number(self.le)}]" if self.le is not None else (f"{_number(self.lt)})" if self.lt is not None else None)
        if low and high:
            return f"in {low}, {high}"
        if self.ge is not None:
            return f"at least {_number(self.ge)}"
        if self.gt is not None:
            return f"> {_number(self.gt)}"
        if self.le is not None:
            return f"at most {_number(self.le)}"
        if self.lt is not None:
            return f"< {_number(self.lt)}"
        return "a finite number"


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


Positive = Annotated[float, Range(gt=0)]  # step sizes, scales, temperatures
NonNegative = Annotated[float, Range(ge=0)]  # weights and coefficients where 0 switches the term off
Fraction = Annotated[float, Range(ge=0, le=1)]  # probabilities, γ, λ, τ, shares of a budget
AtLeastOne = Annotated[int, Range(ge=1)]  # sizes, counts and periods
Count = Annotated[int, Range(ge=0)]  # counts and periods where 0 means none / only at the end / the default
AnyFinite = Annotated[float, Range()]  # any finite number (non-finite values are refused for every flag)
Seed = Annotated[int, Range(ge=0, le=SEED_MAX)]
