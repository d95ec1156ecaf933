"""Part 6 in numbers: attest played across the boundary (``provnet experiment attest``).

Modules: :mod:`~harness.attest.policy` (the trust-policy file and the run
clock), :mod:`~harness.attest.rows` (the closed set of attester behaviours
played), :mod:`~harness.attest.bundle` (an attestation with the receipts it
cites, as a file a third party verifies alone), :mod:`~harness.attest.attester`
(the attester node), :mod:`~harness.attest.play` (the holder's restoration
rule inside a boundary run), :mod:`~harness.attest.runner` (rows, workers),
:mod:`~harness.attest.report` (files, figures, summary) and
:mod:`~harness.attest.cli` (flags). See ``docs/attest.md``.
"""
