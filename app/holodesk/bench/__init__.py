"""Tools around the local Holotron runtime, outside it: ``holodesk bench`` (:mod:`holodesk.bench.cli`) and
the tiny random checkpoint writer (:mod:`holodesk.bench.tiny_checkpoint`).

The bench drives the runtime through the calls the policy makes (``StaticEngine.run``,
``HolotronPolicy.propose``, ``runtime.generate`` for the stock decoder) on a model with random weights or
a real checkpoint. Importing this package or :mod:`holodesk.bench.cli` needs neither torch nor
transformers.
"""
