"""The hostile-input suite (issue 11): every case of tests/data/hostile/generate.py comes to a counted, named outcome.

`CHECKED` lists the cases whose outcome a test asserted in this session; `conftest.py` prints its length in the
terminal summary (`hostile cases: N checked`), for `make test-faults`' count of trials, faults and hostile cases.
"""

CHECKED: list[str] = []
