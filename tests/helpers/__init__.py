"""Plain helpers shared by the tests: import them from here (fixtures live in tests/conftest.py).

No test module imports another test module; what two test modules share lives in this package.
"""
