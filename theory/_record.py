"""The record a derivation returns, and the SymPy check behind ``Derivation.checked``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import sympy


@dataclass(frozen=True)
class Derivation:
    """One symbolic statement and whether SymPy confirmed it.

    ``statement`` is LaTeX; ``detail`` names the identities that were checked (or failed).
    """

    name: str
    statement: str
    checked: bool
    detail: str = ""


def _holds(claim: sympy.Basic | bool) -> bool:
    """A boolean claim must be literally true; an expression must simplify to 0 (tried first as a rational
    function, which settles most claims in a fraction of ``simplify``'s time)."""
    if isinstance(claim, (bool, sympy.logic.boolalg.Boolean)):
        return claim is True or claim is sympy.true
    rational = sympy.cancel(sympy.together(claim))
    return rational == 0 or sympy.simplify(claim) == 0 or sympy.simplify(rational) == 0


def check_claims(name: str, statement: str, claims: Mapping[str, sympy.Basic | bool]) -> Derivation:
    """Build a :class:`Derivation` whose ``checked`` is True iff every claim holds.

    ``claims`` maps a short label to either a SymPy expression that must vanish identically or
    a SymPy boolean (an inequality decided by the symbols' assumptions) that must be true.
    """
    failed = [label for label, claim in claims.items() if not _holds(claim)]
    if failed:
        detail = "FAILED: " + "; ".join(failed)
    else:
        detail = "verified: " + "; ".join(claims)
    return Derivation(name=name, statement=statement, checked=not failed, detail=detail)


@dataclass(frozen=True)
class VerificationReport:
    """The records of :func:`theory.verify_all`; ``str`` prints one ✓/✗ line per derivation."""

    derivations: tuple[Derivation, ...]

    @property
    def all_checked(self) -> bool:
        return all(d.checked for d in self.derivations)

    def __iter__(self) -> Iterator[Derivation]:
        return iter(self.derivations)

    def __len__(self) -> int:
        return len(self.derivations)

    def __getitem__(self, index: int) -> Derivation:
        return self.derivations[index]

    def __str__(self) -> str:
        return "\n".join(f"{'✓' if d.checked else '✗'} {d.name}: {d.detail}" for d in self.derivations)
