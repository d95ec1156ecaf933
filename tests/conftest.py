"""Project-wide test settings.

Hypothesis' per-example deadline measures wall time, which on a shared
2-core machine says more about the neighbours than about the code; property
tests here bound their work by ``max_examples`` instead.
"""

from hypothesis import settings

settings.register_profile("provnet", deadline=None)
settings.load_profile("provnet")
