"""The hostile-input suite (issue 11): every case of tests/data/hostile/generate.py comes to a counted, named outcome.

`CHECKED` lists the cases whose outcome a test asserted in this session; `tests/faults/counts.py` prints how many
in the terminal summary, with the fault trials (`make test-faults`).
"""

CHECKED: list[str] = []
