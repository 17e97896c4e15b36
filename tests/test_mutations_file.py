"""tools/mutation/mutations.toml stays plantable: a restructured line would otherwise leave its mutation unrunnable, and
the bug it stands for unguarded, without any test failing."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTATIONS = tomllib.loads((ROOT / "tools" / "mutation" / "mutations.toml").read_text())["mutation"]


def test_every_mutation_finds_its_line_exactly_once_and_names_tests_that_exist():
    problems = []
    for mutation in MUTATIONS:
        source = (ROOT / mutation["file"]).read_text() if (ROOT / mutation["file"]).is_file() else ""
        if source.count(mutation["find"]) != 1:
            problems.append(f"{mutation['id']}: `find` occurs {source.count(mutation['find'])} times in {mutation['file']}")
        if mutation["find"] == mutation["replace"]:
            problems.append(f"{mutation['id']}: `replace` equals `find`")
        for test in mutation["tests"]:
            if not (ROOT / test.split("::")[0]).is_file():
                problems.append(f"{mutation['id']}: no test file {test.split('::')[0]}")
    assert not problems, "\n".join(problems)


def test_mutation_ids_are_unique():
    ids = [mutation["id"] for mutation in MUTATIONS]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
