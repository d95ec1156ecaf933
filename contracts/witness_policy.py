"""Which witness cosignatures a holder requires of a head: a tlog-policy file.

The format is C2SP tlog-policy's (c2sp.org/tlog-policy), line based, items
separated by spaces and tabs, ``#`` comments and blank lines ignored::

    log <vkey> [<url>]                       a log (type 0x01 vkey); optional
    witness <name> <vkey> [<url>]            a witness (type 0x04 vkey)
    group <name> all|any|<k> <name>...       k of its n members (1 <= k <= n)
    quorum <name>                            exactly one; ``none``: no cosignature

plus one provnet line, so placement by failure domain can be stated and
reported::

    operator <label> <witness name>...       who runs these witnesses

A group or the quorum names only witnesses and groups defined on earlier
lines; a name is a group member at most once, and defined once (witnesses
and groups share one namespace; ``none`` is reserved). Two witnesses (or two
logs) wrapping one public key are refused. Only tab, newline and the bytes
0x20-0x7E and 0x80-0xFF may appear. :func:`parse_policy` is strict: every
error is an :class:`~contracts.errors.EncodingError` naming the line and
what was expected there.

:func:`check_quorum` verifies a checkpoint note against a policy: (1) the
log's signature (:func:`contracts.checkpoint.verify_checkpoint`, with the
log key the caller passes — a provnet head's is its origin line's — or the
policy's log of that origin); (2) each policy witness's cosignature lines
(tlog-cosignature/v1), every one of them: a line that carries a witness's
name and key id but does not verify **fails the quorum, naming that
witness** (signed-note: such a note is malformed); a cosignature dated more
than :data:`MAX_FUTURE_SKEW_MS` after ``now`` does not count, and is named;
(3) the groups, bottom up, and the quorum. The result says which witnesses
cosigned, which groups were satisfied, which operators the cosigners run,
and, when the quorum fails, why.

Two conflicting heads can both gather a quorum of q cosignatures out of n
witnesses, f of whom collude, only when 2q <= n + f (an honest witness
cosigns one of two conflicting checkpoints, never both): choose q > (n+f)/2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from contracts.checkpoint import VerifiedCheckpoint, verify_checkpoint
from contracts.errors import BadSignature, ContractError, EncodingError, NotAuthorized
from contracts.note import (
    MAX_NOTE_BYTES,
    MAX_SIGNATURES,
    SIG_TYPE_COSIGNATURE_V1,
    SIG_TYPE_ED25519,
    LineNotVerified,
    VerifierKey,
)

__all__ = [
    "MAX_FUTURE_SKEW_MS",
    "MAX_POLICY_BYTES",
    "MAX_POLICY_ENTRIES",
    "NONE",
    "Group",
    "PolicyWitness",
    "QuorumResult",
    "WitnessPolicy",
    "check_quorum",
    "parse_policy",
    "verify_quorum",
]

#: The predefined name of the empty quorum.
NONE = "none"
#: A policy file larger than this is refused before it is read.
MAX_POLICY_BYTES = 256 * 1024
#: Logs, witnesses and groups each (tlog-policy recommends supporting 32).
MAX_POLICY_ENTRIES = 256
#: A cosignature dated up to this far after the holder's clock still counts
#: (clocks of different machines disagree); later ones are named and ignored.
MAX_FUTURE_SKEW_MS = 60_000
_ALLOWED = frozenset([0x09, 0x0A, *range(0x20, 0x7F), *range(0x80, 0x100)])


@dataclass(frozen=True, slots=True)
class PolicyWitness:
    """A witness of the policy: its name here, its cosigning key, URL and operator."""

    name: str
    key: VerifierKey
    url: str | None = None
    operator: str | None = None


@dataclass(frozen=True, slots=True)
class Group:
    """``k`` of ``members`` (witness or group names) must have witnessed."""

    name: str
    k: int
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WitnessPolicy:
    """A parsed policy file. ``quorum`` is a witness or group name, or :data:`NONE`."""

    logs: tuple[VerifierKey, ...]
    witnesses: Mapping[str, PolicyWitness]
    groups: Mapping[str, Group]
    quorum: str
    #: the file as read
    text: bytes = field(default=b"", compare=False, repr=False)

    def log_for(self, origin: str) -> VerifierKey | None:
        """The policy's log key for ``origin`` (a log's key name is its origin line)."""
        return next((k for k in self.logs if k.name == origin), None)

    @property
    def cosigners(self) -> tuple[VerifierKey, ...]:
        return tuple(w.key for w in self.witnesses.values())


def _split(line: str) -> list[str]:
    return line.replace("\t", " ").split()


def _vkey(text: str, sig_type: int, number: int, what: str) -> VerifierKey:
    try:
        key = VerifierKey.parse(text)
    except EncodingError as exc:
        raise EncodingError(f"policy line {number}: {what}: {exc}") from exc
    if key.sig_type != sig_type:
        expected = "0x01 (Ed25519)" if sig_type == SIG_TYPE_ED25519 else "0x04 (cosignature/v1)"
        raise EncodingError(
            f"policy line {number}: {what} {key.key} has signature type"
            f" 0x{key.sig_type:02x}, expected {expected}"
        )
    return key


def _threshold(text: str, n: int, number: int, name: str) -> int:
    if text == "all":
        return n
    if text == "any":
        return 1
    if not text.isascii() or not text.isdigit() or (text != "0" and text.startswith("0")):
        raise EncodingError(
            f"policy line {number}: group {name}: expected 'all', 'any' or a decimal k,"
            f" got {text!r:.40}"
        )
    if len(text) > 4 or not 1 <= int(text) <= n:
        raise EncodingError(
            f"policy line {number}: group {name}: k must be 1..{n} (its members), got {text:.8}"
        )
    return int(text)


def parse_policy(data: bytes | str) -> WitnessPolicy:
    """Parse a policy file strictly; :class:`EncodingError` names the line and what it expected."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_POLICY_BYTES:
        raise EncodingError(f"policy is {len(raw)} bytes, more than {MAX_POLICY_BYTES}")
    bad = next((i for i, b in enumerate(raw) if b not in _ALLOWED), None)
    if bad is not None:
        line_no = raw[:bad].count(b"\n") + 1
        raise EncodingError(
            f"policy line {line_no}: byte 0x{raw[bad]:02x} is not allowed"
            " (only tab, newline, 0x20-0x7E and 0x80-0xFF)"
        )
    text = raw.decode("utf-8", errors="surrogateescape")
    logs: list[VerifierKey] = []
    witnesses: dict[str, PolicyWitness] = {}
    groups: dict[str, Group] = {}
    operators: dict[str, str] = {}
    public_keys: dict[bytes, str] = {}
    used_as_member: set[str] = set()
    quorum: str | None = None

    def define(name: str, number: int) -> None:
        if name == NONE:
            raise EncodingError(f"policy line {number}: the name 'none' is reserved")
        if name in witnesses or name in groups:
            raise EncodingError(f"policy line {number}: name {name!r:.80} is defined twice")
        if len(witnesses) + len(groups) >= 2 * MAX_POLICY_ENTRIES:
            raise EncodingError(f"policy line {number}: more than {MAX_POLICY_ENTRIES} names")

    def unique_key(key: VerifierKey, number: int, what: str) -> None:
        seen = public_keys.get(key.public.raw)
        if seen is not None:
            raise EncodingError(
                f"policy line {number}: {what} {key.key} wraps the public key of {seen}"
            )
        public_keys[key.public.raw] = f"{what} {key.key}"

    for number, line in enumerate(text.split("\n"), start=1):
        items = _split(line)
        if not items or items[0].startswith("#"):
            continue
        keyword, args = items[0], items[1:]
        if keyword == "log":
            if len(args) not in (1, 2):
                raise EncodingError(f"policy line {number}: expected 'log <vkey> [<url>]'")
            key = _vkey(args[0], SIG_TYPE_ED25519, number, "log")
            unique_key(key, number, "log")
            if len(logs) >= MAX_POLICY_ENTRIES:
                raise EncodingError(f"policy line {number}: more than {MAX_POLICY_ENTRIES} logs")
            logs.append(key)
        elif keyword == "witness":
            if len(args) not in (2, 3):
                raise EncodingError(
                    f"policy line {number}: expected 'witness <name> <vkey> [<url>]'"
                )
            name = args[0]
            define(name, number)
            key = _vkey(args[1], SIG_TYPE_COSIGNATURE_V1, number, f"witness {name}")
            unique_key(key, number, f"witness {name}")
            witnesses[name] = PolicyWitness(name, key, args[2] if len(args) == 3 else None)
        elif keyword == "group":
            if len(args) < 3:
                raise EncodingError(
                    f"policy line {number}: expected 'group <name> all|any|<k> <name>...'"
                )
            name, k_text, members = args[0], args[1], tuple(args[2:])
            define(name, number)
            for member in members:
                if member == NONE:
                    raise EncodingError(
                        f"policy line {number}: group {name}: 'none' cannot be a member"
                    )
                if member not in witnesses and member not in groups:
                    raise EncodingError(
                        f"policy line {number}: group {name}: member {member!r:.80} is not a"
                        " witness or group defined on an earlier line"
                    )
                if member in used_as_member:
                    raise EncodingError(
                        f"policy line {number}: group {name}: {member!r:.80} is already a"
                        " member of a group (each name is a member at most once)"
                    )
                used_as_member.add(member)
            groups[name] = Group(name, _threshold(k_text, len(members), number, name), members)
        elif keyword == "quorum":
            if len(args) != 1:
                raise EncodingError(f"policy line {number}: expected 'quorum <name>'")
            if quorum is not None:
                raise EncodingError(f"policy line {number}: a second quorum line")
            if args[0] != NONE and args[0] not in witnesses and args[0] not in groups:
                raise EncodingError(
                    f"policy line {number}: quorum {args[0]!r:.80} is not 'none' or a witness"
                    " or group defined on an earlier line"
                )
            quorum = args[0]
        elif keyword == "operator":
            if len(args) < 2:
                raise EncodingError(
                    f"policy line {number}: expected 'operator <label> <witness name>...'"
                )
            label = args[0]
            for name in args[1:]:
                if name not in witnesses:
                    raise EncodingError(
                        f"policy line {number}: operator {label}: {name!r:.80} is not a"
                        " witness defined on an earlier line"
                    )
                if name in operators:
                    raise EncodingError(
                        f"policy line {number}: witness {name} already has operator"
                        f" {operators[name]!r:.80}"
                    )
                operators[name] = label
        else:
            raise EncodingError(
                f"policy line {number}: expected log, witness, group, quorum or operator,"
                f" got {keyword!r:.40}"
            )
    if quorum is None:
        raise EncodingError("policy: no quorum line (exactly one is required)")
    for name, label in operators.items():
        w = witnesses[name]
        witnesses[name] = PolicyWitness(w.name, w.key, w.url, label)
    return WitnessPolicy(
        logs=tuple(logs),
        witnesses=MappingProxyType(witnesses),
        groups=MappingProxyType(groups),
        quorum=quorum,
        text=raw,
    )


@dataclass(frozen=True, slots=True)
class QuorumResult:
    """What a note's cosignatures satisfy under a policy. Truthy iff the quorum is met."""

    ok: bool
    quorum: str
    #: policy witness names whose cosignature verified (and counts), in policy order
    cosigned: tuple[str, ...]
    #: groups satisfied, in policy order
    groups: tuple[str, ...]
    #: operators of the witnesses that cosigned (``None`` for a witness without one)
    operators: tuple[str, ...]
    #: witnesses whose lines are present but do not count, with why
    refused: tuple[tuple[str, str], ...]
    message: str
    checkpoint: VerifiedCheckpoint | None = None

    def __bool__(self) -> bool:
        return self.ok


def _satisfied(policy: WitnessPolicy, cosigned: set[str]) -> list[str]:
    done = set(cosigned)
    out: list[str] = []
    # Groups only name earlier definitions: one pass in order decides them all.
    for group in policy.groups.values():
        if sum(m in done for m in group.members) >= group.k:
            done.add(group.name)
            out.append(group.name)
    return out


def _why_not(policy: WitnessPolicy, name: str, done: set[str]) -> str:
    if name in policy.witnesses:
        return f"witness {name} did not cosign"
    group = policy.groups[name]
    have = [m for m in group.members if m in done]
    missing = [m for m in group.members if m not in done]
    return (
        f"group {name} needs {group.k} of {len(group.members)}, has {len(have)}"
        f" ({', '.join(have) or 'none'}); missing {', '.join(missing)}"
    )


def _evaluate(
    note: bytes,
    policy: WitnessPolicy,
    now: int,
    log_key: VerifierKey | None,
    max_bytes: int = MAX_NOTE_BYTES,
    max_signatures: int = MAX_SIGNATURES,
) -> QuorumResult:
    raw = bytes(note)
    # the origin line names the log's key; verify_checkpoint checks it is the origin
    end = raw.find(b"\n", 0, max_bytes)
    try:
        origin = raw[: max(end, 0)].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EncodingError(f"checkpoint origin line is not UTF-8 (byte {exc.start})") from exc
    key = log_key if log_key is not None else policy.log_for(origin)
    if key is None:
        raise NotAuthorized(f"checkpoint of log {origin!r:.100}: not a log of this policy")
    # (1) the log signed it and (2) every line of every policy witness verifies:
    # one parse, each signature checked once
    by_key = {w.key.key: w for w in policy.witnesses.values()}
    try:
        verified = verify_checkpoint(
            raw,
            log_key=key,
            origin=origin,
            cosigners=policy.cosigners,
            max_bytes=max_bytes,
            max_signatures=max_signatures,
        )
    except LineNotVerified as exc:
        w = by_key.get(exc.key.key)
        if w is None:
            raise
        raise BadSignature(
            f"forged or damaged cosignature of witness {w.name} ({w.key.key}): {exc}"
        ) from exc
    # future-dated cosignatures do not count
    dated = {v.key.key: v.timestamp or 0 for v in verified.cosignatures}
    cosigned: list[str] = []
    refused: list[tuple[str, str]] = []
    for w in policy.witnesses.values():
        timestamp = dated.get(w.key.key)
        if timestamp is None:
            continue
        if timestamp * 1000 > now + MAX_FUTURE_SKEW_MS:
            refused.append(
                (w.name, f"cosignature dated {timestamp} s, after now ({now // 1000} s)")
            )
            continue
        cosigned.append(w.name)
    # (3) groups bottom up, then the quorum
    groups = _satisfied(policy, set(cosigned))
    done = set(cosigned) | set(groups)
    operators = tuple(
        dict.fromkeys(policy.witnesses[n].operator or f"(no operator: {n})" for n in cosigned)
    )
    ok = policy.quorum == NONE or policy.quorum in done
    where = f"checkpoint {origin!r:.100} at size {verified.checkpoint.size}"
    if ok:
        message = f"{where}: quorum {policy.quorum} met by {', '.join(cosigned) or 'none needed'}"
    else:
        unmet = [
            _why_not(policy, name, done)
            for name in (*policy.groups, policy.quorum)
            if name not in done
        ]
        extra = "".join(f"; {n}: {why}" for n, why in refused)
        message = (
            f"{where}: quorum {policy.quorum} not met, cosigned by"
            f" {', '.join(cosigned) or 'no policy witness'}; "
            f"{'; '.join(dict.fromkeys(unmet))}{extra}"
        )
    return QuorumResult(
        ok,
        policy.quorum,
        tuple(cosigned),
        tuple(groups),
        operators,
        tuple(refused),
        message,
        verified,
    )


def check_quorum(
    note: bytes,
    policy: WitnessPolicy,
    now: int,
    *,
    log_key: VerifierKey | None = None,
    max_bytes: int = MAX_NOTE_BYTES,
    max_signatures: int = MAX_SIGNATURES,
) -> QuorumResult:
    """Verify ``note``'s log signature and the policy's cosignatures against its quorum.

    ``now`` is ms since the Unix epoch; ``log_key`` the log's key (a provnet
    head's: :func:`contracts.head_note.head_log_key`), else the policy's log
    of the note's origin. Never raises for untrusted input: the result is
    falsy when the quorum is not met or the note does not verify, and its
    ``message`` says why — a forged cosignature names its witness.
    """
    try:
        return _evaluate(note, policy, now, log_key, max_bytes, max_signatures)
    except ContractError as exc:
        return QuorumResult(False, policy.quorum, (), (), (), (), str(exc))


def verify_quorum(
    note: bytes,
    policy: WitnessPolicy,
    *,
    now: int,
    log_key: VerifierKey | None = None,
) -> QuorumResult:
    """:func:`check_quorum`, raising: :class:`BadSignature` (a forged cosignature, naming
    the witness, or the log's), :class:`EncodingError` (a malformed note) or
    :class:`NotAuthorized` (the quorum is not met, naming the groups short of it)."""
    result = _evaluate(note, policy, now, log_key)
    if not result:
        raise NotAuthorized(result.message)
    return result
