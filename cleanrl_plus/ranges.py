"""Valid ranges of numeric flags, declared once next to each field and checked by one function before anything is
created (`check_ranges`, called by cleanrl_plus/config.py's `validate_args`).

    learning_rate: Positive = 3e-4                            # > 0
    gamma: Fraction = 0.99                                    # in [0, 1]
    hidden_sizes: tuple[AtLeastOne, ...] = (256, 256)         # every entry at least 1
    anchor_decay: Annotated[float, Range(gt=0, le=1)] = 0.5   # anything else: a Range of its own

Every int or float field of an agent's flags (nested settings included) declares one; tests/test_flag_ranges.py
enumerates them, so a flag added without a range fails there. A range that depends on the network (how many layers
a reset may touch) is checked where the network exists, before the run directory is written.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any, Iterator

from cleanrl_plus.errors import UserError

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


def declared_ranges(settings: type, prefix: str = "") -> Iterator[tuple[str, type, Range | None, bool]]:
    """(dotted field name, number type, its Range or None, whether the field is a tuple of them) for every int or
    float field of a settings dataclass and of the dataclasses nested in it; bools are flags, not numbers."""
    hints = typing.get_type_hints(settings, include_extras=True)
    for field in dataclasses.fields(settings):
        hint = hints[field.name]
        if dataclasses.is_dataclass(hint):
            yield from declared_ranges(hint, f"{prefix}{field.name}.")
            continue
        if typing.get_origin(hint) in (typing.Union, types.UnionType):  # `X | None`: None stands for a default
            hint = next(member for member in typing.get_args(hint) if member is not type(None))
        is_tuple = typing.get_origin(hint) is tuple
        for member in typing.get_args(hint) if is_tuple else (hint,):
            if member is Ellipsis:
                continue
            base, metadata = (
                (typing.get_args(member)[0], member.__metadata__) if typing.get_origin(member) is Annotated else (member, ())
            )
            if base in (int, float):
                yield f"{prefix}{field.name}", base, next((m for m in metadata if isinstance(m, Range)), None), is_tuple
                break


def out_of_range(settings: Any) -> tuple[str, Any, Range] | None:
    """(flag, value, range) of the first field of `settings` (a dataclass instance) outside its declared range."""
    for name, _, bounds, is_tuple in declared_ranges(type(settings)):
        value = settings
        for part in name.split("."):
            value = getattr(value, part)
        for number in value if is_tuple else (value,):
            if bounds is not None and number is not None and number not in bounds:
                return "--" + name.replace("_", "-"), value, bounds
    return None


def check_ranges(settings: Any) -> None:
    """One-line UserError naming the flag, its value and its range, for the first number out of its range."""
    found = out_of_range(settings)
    if found is not None:
        flag, value, bounds = found
        if isinstance(value, (tuple, list)):
            raise UserError(f"{flag} entries must be {bounds}, got {' '.join(map(str, value))}")
        raise UserError(f"{flag} must be {bounds}, got {value}")
