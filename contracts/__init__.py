"""provnet contracts: pure, synchronous verification of the serve and attest contracts."""

__all__: list[str] = []
