"""SQLite schema of a node's hop log (see ``docs/store.md``).

Every statement a node stores — its own or a peer's — is kept as the exact
envelope bytes it was signed or received as; nothing is re-serialised. Hop
bytes are the canonical bytes the commitment root was computed over.

Times are integer milliseconds since the Unix epoch (as in ``contracts``).
Digests and Merkle roots are lowercase hex strings. Epochs are opaque
strings (``<counter>-<random>``), unique even across a restore from backup.
"""

from __future__ import annotations

__all__ = ["DDL", "SCHEMA_VERSION"]

#: Bumped on any incompatible change; a store refuses to open a database
#: written with another version rather than guess. 2: fold records and fold
#: proofs in their one binary encoding (contracts.fold_layout); version 1 held
#: them as JSON.
SCHEMA_VERSION = 2

DDL: tuple[str, ...] = (
    # (origin, epoch, seq) is the key: an epoch changes whenever seqs could be
    # reused, so a recycled seq can never resolve an old commitment (seed 000).
    """
    CREATE TABLE IF NOT EXISTS hops (
        origin      TEXT    NOT NULL,
        epoch       TEXT    NOT NULL,
        seq         INTEGER NOT NULL,
        hop_bytes   BLOB    NOT NULL,
        digest      TEXT    NOT NULL,
        appended_at INTEGER NOT NULL,
        PRIMARY KEY (origin, epoch, seq)
    ) WITHOUT ROWID
    """,
    # status: 'durable' — every member hop landed in the same transaction as
    # the commitment; 'pending' — provenance_pending mode, hops not landed yet;
    # 'lost' — pending hops that can no longer land (crash before landing).
    """
    CREATE TABLE IF NOT EXISTS commitments (
        digest      TEXT    PRIMARY KEY,
        origin      TEXT    NOT NULL,
        epoch       TEXT    NOT NULL,
        value_ref   TEXT    NOT NULL,
        fold_seq    INTEGER NOT NULL,
        leaf_count  INTEGER NOT NULL CHECK (leaf_count >= 1),
        root        TEXT    NOT NULL,
        envelope    BLOB    NOT NULL,
        local       INTEGER NOT NULL CHECK (local IN (0, 1)),
        status      TEXT    NOT NULL CHECK (status IN ('durable', 'pending', 'lost')),
        created_at  INTEGER NOT NULL
    )
    """,
    # A correct origin signs one commitment per (epoch, value_ref, fold_seq);
    # peers' commitments are not constrained (two of them are equivocation
    # evidence that the holder must be able to keep).
    """
    CREATE UNIQUE INDEX IF NOT EXISTS commitments_local_fold
        ON commitments (origin, epoch, value_ref, fold_seq) WHERE local = 1
    """,
    """
    CREATE INDEX IF NOT EXISTS commitments_status ON commitments (status)
    """,
    # A value's next fold sequence (HopStore.next_fold_seq[s], read at every
    # compaction) is the highest over all of the value's rows, a peer's copy of an
    # own commitment included: the partial index above cannot answer it, and
    # without this one the read scans a table that grows with every fold held.
    """
    CREATE INDEX IF NOT EXISTS commitments_value
        ON commitments (origin, epoch, value_ref, fold_seq)
    """,
    """
    CREATE TABLE IF NOT EXISTS fold_members (
        commitment_digest TEXT    NOT NULL REFERENCES commitments (digest),
        leaf_index        INTEGER NOT NULL,
        origin            TEXT    NOT NULL,
        epoch             TEXT    NOT NULL,
        seq               INTEGER NOT NULL,
        PRIMARY KEY (commitment_digest, leaf_index)
    ) WITHOUT ROWID
    """,
    """
    CREATE INDEX IF NOT EXISTS fold_members_hop ON fold_members (origin, epoch, seq)
    """,
    """
    CREATE TABLE IF NOT EXISTS obligations (
        digest            TEXT PRIMARY KEY,
        commitment_digest TEXT NOT NULL REFERENCES commitments (digest),
        serve_until       INTEGER NOT NULL,
        envelope          BLOB NOT NULL,
        local             INTEGER NOT NULL CHECK (local IN (0, 1)),
        created_at        INTEGER NOT NULL
    )
    """,
    """
    CREATE INDEX IF NOT EXISTS obligations_commitment
        ON obligations (commitment_digest, serve_until)
    """,
    # Signed tree heads (contracts.heads): one per compaction. An own head's
    # folds are ordinary commitments rows (digest = the fold record's RFC 6962
    # leaf hash, envelope = the record's leaf data) with one obligations row
    # each whose digest is the fold's *binding* (SHA-256 of head digest ‖ leaf
    # hash, both raw) and whose envelope is the signed head: the head is every
    # one of its folds' obligation, so eviction (S5) and resolution read the
    # same tables as for per-fold statements.
    """
    CREATE TABLE IF NOT EXISTS heads (
        digest      TEXT    PRIMARY KEY,
        origin      TEXT    NOT NULL,
        epoch       TEXT    NOT NULL,
        seq         INTEGER NOT NULL,
        serve_until INTEGER NOT NULL,
        envelope    BLOB    NOT NULL,
        local       INTEGER NOT NULL CHECK (local IN (0, 1)),
        created_at  INTEGER NOT NULL
    )
    """,
    """
    CREATE UNIQUE INDEX IF NOT EXISTS heads_local_seq
        ON heads (origin, epoch, seq) WHERE local = 1
    """,
    # One row per fold under a head: its fold proof (contracts.fold_layout bytes).
    """
    CREATE TABLE IF NOT EXISTS head_folds (
        head_digest TEXT NOT NULL REFERENCES heads (digest),
        leaf_hash   TEXT NOT NULL REFERENCES commitments (digest),
        binding     TEXT NOT NULL,
        proof       BLOB NOT NULL,
        PRIMARY KEY (head_digest, leaf_hash)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS evidence (
        digest            TEXT PRIMARY KEY,
        kind              TEXT NOT NULL,
        accused           TEXT NOT NULL,
        commitment_digest TEXT,
        file_path         TEXT,
        body              BLOB NOT NULL,
        created_at        INTEGER NOT NULL
    )
    """,
    """
    CREATE INDEX IF NOT EXISTS evidence_accused ON evidence (accused, kind)
    """,
    # A suspicion cleared by a later receipt of the accused (design: S4).
    """
    CREATE TABLE IF NOT EXISTS evidence_cleared (
        digest     TEXT PRIMARY KEY REFERENCES evidence (digest),
        receipt    BLOB NOT NULL,
        cleared_at INTEGER NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS attestations (
        digest       TEXT PRIMARY KEY,
        value_digest TEXT NOT NULL,
        attester     TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        envelope     BLOB NOT NULL,
        created_at   INTEGER NOT NULL
    )
    """,
    """
    CREATE INDEX IF NOT EXISTS attestations_value ON attestations (value_digest)
    """,
    # Custody (nodes.custodian, docs/custody.md): folds of another origin this node
    # holds as custodian. Written in the order of seed 000: the hops and the hold
    # (with the serve_until the statement will carry) commit first; only then is
    # the custody statement signed and kept. The reaper deletes a fold's hops only
    # once its hold expired (S5): a hold's serve_until is never below that of a
    # statement naming the fold.
    """
    CREATE TABLE IF NOT EXISTS custody_holds (
        leaf_hash   TEXT    NOT NULL,
        head_digest TEXT    NOT NULL,
        origin      TEXT    NOT NULL,
        root        TEXT    NOT NULL,
        leaf_count  INTEGER NOT NULL CHECK (leaf_count >= 1),
        head_note   BLOB    NOT NULL,
        proof       BLOB    NOT NULL,
        serve_until INTEGER NOT NULL,
        created_at  INTEGER NOT NULL,
        PRIMARY KEY (head_digest, leaf_hash)
    ) WITHOUT ROWID
    """,
    """
    CREATE INDEX IF NOT EXISTS custody_holds_leaf ON custody_holds (leaf_hash)
    """,
    # A fold's hop bytes by its record's leaf hash: the record names the root, so
    # one leaf hash is one byte string per leaf, whichever head proves it.
    """
    CREATE TABLE IF NOT EXISTS custody_hops (
        leaf_hash  TEXT    NOT NULL,
        leaf_index INTEGER NOT NULL,
        hop_bytes  BLOB    NOT NULL,
        PRIMARY KEY (leaf_hash, leaf_index)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS custody_statements (
        digest      TEXT    PRIMARY KEY,
        head_digest TEXT    NOT NULL,
        note        BLOB    NOT NULL,
        serve_until INTEGER NOT NULL,
        created_at  INTEGER NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS custody_statement_folds (
        leaf_hash   TEXT NOT NULL,
        head_digest TEXT NOT NULL,
        digest      TEXT NOT NULL REFERENCES custody_statements (digest),
        PRIMARY KEY (head_digest, leaf_hash, digest)
    ) WITHOUT ROWID
    """,
    # A witness's state per log it cosigns (c2sp.org/tlog-witness): the size,
    # root and note of the latest checkpoint it cosigned, written in the same
    # transaction that read the state the cosignature was decided on, and
    # committed before the cosignature is returned (nodes.cosigner). A new
    # table in a database of this version is created when the store opens.
    """
    CREATE TABLE IF NOT EXISTS witness_logs (
        origin     TEXT    PRIMARY KEY,
        size       INTEGER NOT NULL CHECK (size >= 0),
        root       BLOB    NOT NULL,
        note       BLOB    NOT NULL,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS counters (
        name  TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID
    """,
)
