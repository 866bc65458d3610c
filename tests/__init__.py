"""wmrl's tests, in folders that mirror the package (tests/rl/ tests wmrl_cli/rl/, ...).

Every folder is a package, so `tests.helpers` imports the same way however pytest is started.
Fixtures live in conftest.py files; what several tests share and is not a fixture lives in
tests/helpers/. No test module imports another (tests/test_house.py checks it).
"""
