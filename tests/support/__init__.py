"""Shared helpers of the test suite: model builders, the partition corpus, hostile-input checks,
hand-written artifacts and the hypothesis strategies (``support.strategies``).

Test modules import them as ``from support import corpus`` or ``from support.models import
Builder``: pytest puts ``tests/`` on ``sys.path`` (``pythonpath`` in pyproject.toml), and the
benchmarks insert it themselves. A test module imports no other test module.
"""
