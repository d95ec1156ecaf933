"""The attester behaviours a run plays, as one closed set (``Row``).

Every row is the same death-spiral (or matrix) run with one attester node;
only what that attester signs — and what the trust policy grants it —
differs. The rows under *authority* must change nothing: each of their
attestations is rejected with a reason, 0 axes go up, 0 decisions change.

==========================  ================================================  ==========
row                         the attester                                      expected
==========================  ================================================  ==========
``none``                    no attester (attest disabled)                     Part 5
``honest``                  verifies the holder's receipts, signs             restores
``outside_policy``          honest, but its key is not in the policy          nothing
``ungranted_axis``          granted capability only, raises reconstruction    nothing
``above_ceiling``           granted reconstruction ≤ 0.5, attests 1.0         nothing
``no_proof``                reconstruction citing no receipts                 nothing
``other_value_receipts``    cites receipts of another value's rehydration     nothing
``forged_receipts``         receipts re-signed by itself, not the origin      nothing
``tampered_receipts``       one served hop altered after the receipt          nothing
``partial_receipts``        receipts for only some commitments / leaves       nothing
``replayed``                a valid attestation of another value (A2)         nothing
``expired``                 attestations already past ``expires_at`` (A7)     nothing
``revoked``                 honest, key revoked mid-run (A7)                  nothing after
``taint_discharge``         granted one taint kind, discharges it (A5)        those taints
``dishonest``               trusted for one axis, attests 1.0 on every axis   its axis only
==========================  ================================================  ==========
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

from contracts.statements import Axis
from harness.attest.policy import AttesterGrant, AttestPolicy

__all__ = ["ATTESTER", "AUTHORITY_ROWS", "TAINT_KIND", "Row", "RowSpec"]

#: The attester node's name in every row.
ATTESTER = "attester"
#: The taint kind the ``taint_discharge`` row is granted.
TAINT_KIND = "unverified_web"


class Row(StrEnum):
    NONE = "none"
    HONEST = "honest"
    OUTSIDE_POLICY = "outside_policy"
    UNGRANTED_AXIS = "ungranted_axis"
    ABOVE_CEILING = "above_ceiling"
    NO_PROOF = "no_proof"
    OTHER_VALUE_RECEIPTS = "other_value_receipts"
    FORGED_RECEIPTS = "forged_receipts"
    TAMPERED_RECEIPTS = "tampered_receipts"
    PARTIAL_RECEIPTS = "partial_receipts"
    REPLAYED = "replayed"
    EXPIRED = "expired"
    REVOKED = "revoked"
    TAINT_DISCHARGE = "taint_discharge"
    DISHONEST = "dishonest"

    @property
    def must_change_nothing(self) -> bool:
        match self:
            case Row.NONE | Row.HONEST | Row.TAINT_DISCHARGE | Row.DISHONEST | Row.REVOKED:
                return False
            case (
                Row.OUTSIDE_POLICY
                | Row.UNGRANTED_AXIS
                | Row.ABOVE_CEILING
                | Row.NO_PROOF
                | Row.OTHER_VALUE_RECEIPTS
                | Row.FORGED_RECEIPTS
                | Row.TAMPERED_RECEIPTS
                | Row.PARTIAL_RECEIPTS
                | Row.REPLAYED
                | Row.EXPIRED
            ):
                return True
            case _:
                assert_never(self)


#: Rows whose attestations must all be rejected (revoked: from its revocation on).
AUTHORITY_ROWS: tuple[Row, ...] = (
    *(r for r in Row if r.must_change_nothing),
    Row.REVOKED,
)


@dataclass(frozen=True, slots=True)
class RowSpec:
    """One row to play: the behaviour, the granted axis (``dishonest``), the lifetime."""

    row: Row
    axis: Axis | None = None
    lifetime_steps: int | None = None

    @property
    def name(self) -> str:
        name = self.row.value
        if self.axis is not None:
            name += f":{self.axis.value}"
        if self.lifetime_steps is not None:
            name += f"@L{self.lifetime_steps}"
        return name

    def policy(self, base: AttestPolicy, steps: int) -> AttestPolicy:
        """The trust policy this row runs under, derived from the file's."""
        p = base if self.lifetime_steps is None else base.with_lifetime(self.lifetime_steps)
        recon = AttesterGrant({Axis.RECONSTRUCTION: 1.0})
        row = self.row
        match row:
            case Row.NONE | Row.HONEST | Row.NO_PROOF | Row.OTHER_VALUE_RECEIPTS:
                return p if ATTESTER in p.attesters else p.with_grant(ATTESTER, recon)
            case (
                Row.FORGED_RECEIPTS
                | Row.TAMPERED_RECEIPTS
                | Row.PARTIAL_RECEIPTS
                | Row.REPLAYED
                | Row.EXPIRED
            ):
                return p.with_grant(ATTESTER, recon)
            case Row.OUTSIDE_POLICY:
                return p.with_grant(ATTESTER, None)
            case Row.UNGRANTED_AXIS:
                return p.with_grant(ATTESTER, AttesterGrant({Axis.CAPABILITY: 1.0}))
            case Row.ABOVE_CEILING:
                return p.with_grant(ATTESTER, AttesterGrant({Axis.RECONSTRUCTION: 0.5}))
            case Row.REVOKED:
                return p.with_grant(ATTESTER, recon).with_revocation(ATTESTER, steps // 2)
            case Row.TAINT_DISCHARGE:
                return p.with_grant(
                    ATTESTER,
                    AttesterGrant({Axis.VERIFICATION: 0.0}, frozenset({TAINT_KIND})),
                )
            case Row.DISHONEST:
                if self.axis is None:
                    raise ValueError("the dishonest row needs the axis it is granted")
                return p.with_grant(ATTESTER, AttesterGrant({self.axis: 1.0}))
            case _:
                assert_never(row)
