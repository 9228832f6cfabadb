"""Hypothesis strategies of the fuzz tests, one module per thing generated:

- ``cnn``: random valid ONNX CNNs (``cnn_models``, ``policies``), drawn from the blocks of
  ``blocks``, built by ``model_builder.ModelBuilder`` (window sizes: ``geometry``);
  ``generated``: ``GeneratedModel``, ``from_spec`` (a model rebuilt from the spec hypothesis
  prints) and ``quantized``;
- ``qdq``: the same CNNs quantized to QDQ int8 by Marvell's recipe (``qdq_models``);
- ``rule_files``: mutated rule files (``rule_mutations``, ``rule_semantic_mutations``) and valid
  overriding ones (``rule_overrides``);
- ``artifacts``: mutated Nodes-JSON / Constants-JSON pairs and manifests (each drawn as a
  ``mutation.Mutation``);
- ``hostile``: what an attacker or a broken tool writes into a document.
"""
