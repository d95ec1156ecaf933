"""Custody of folds and witness-cosigned heads (design revision 3; docs/custody.md).

:mod:`~harness.custody.split_view`: the split-view rows, an origin that shows
two holders two heads against a witness quorum.
"""
