"""Validates reports against docs/report.schema.json: the v1 fixtures and a freshly written
sample with every field filled must pass; documents with a wrong type, a missing key or an
unknown key must fail (the schema is not vacuous). Usage: validate_schema.py SCHEMA SAMPLE FIXTURE_DIR"""
import copy
import glob
import json
import os
import sys

import jsonschema


def main():
    schema_path, sample_path, fixtures = sys.argv[1:4]
    with open(schema_path) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    failures = 0
    paths = [sample_path] + sorted(glob.glob(os.path.join(fixtures, "*.json")))
    assert len(paths) >= 3, paths
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        errors = list(validator.iter_errors(doc))
        print(("ok   " if not errors else "FAIL ") + path)
        for e in errors[:5]:
            print("     ", "/".join(map(str, e.absolute_path)), e.message[:200])
        failures += bool(errors)
    with open(sample_path) as f:
        sample = json.load(f)
    mutations = {
        "string where an integer belongs": lambda d: d["memory"][0].__setitem__("tracked_bytes", "13"),
        "negative size": lambda d: d["sites"][0].__setitem__("bytes", -1),
        "missing key": lambda d: d["trigger"].pop("requested_bytes"),
        "unknown key": lambda d: d["capture"].__setitem__("surprise", 1),
        "unknown trigger": lambda d: d["trigger"].__setitem__("kind", "panic"),
        "short timeline row": lambda d: d["timeline"]["rows"][0].pop(),
        "other schema": lambda d: d.__setitem__("schema", "oomscope.report/2"),
    }
    for name, mutate in mutations.items():
        doc = copy.deepcopy(sample)
        mutate(doc)
        rejected = not validator.is_valid(doc)
        print(("ok   " if rejected else "FAIL ") + "rejects " + name)
        failures += not rejected
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
