"""provnet as an A2A extension: Agent Cards, delegation messages, a serving agent.

An A2A agent that speaks this extension carries a compacted value with its
origins' signed statements in a delegation ``Message`` and, on receipt,
rehydrates it from the origin the statements name, over provnet's Serve
service, before it gates an action on it. The layout, the card parameters and
the errors are specified in ``docs/a2a.md``.

* :mod:`nodes.a2a.extension` — the extension URI, media types, card
  parameters, the message layout (build and read, bounded, every refusal an
  A2A error naming what failed);
* :mod:`nodes.a2a.card` — Agent Card signatures (A2A §8.4: a JWS with EdDSA
  over the RFC 8785 form of the card);
* :mod:`nodes.a2a.agent` — the receiving agent: its request handler (activation
  and admission), its executor (rehydrate, gate, forward), its JSON-RPC app,
  and the A2A gRPC service hosted on the node's own server;
* :mod:`nodes.a2a.delegate` — the delegating side over the SDK's client.

Needs the ``a2a`` extra (``pip install -e '.[a2a]'``; ``.[dev]`` has it).
"""
