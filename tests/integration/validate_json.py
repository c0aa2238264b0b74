#!/usr/bin/python3
"""validate_json.py SCHEMA FILE: check each JSON line of FILE against SCHEMA.

Prints every violation with its path and exits 1 if there is any; exits 2
when the jsonschema module (Debian: python3-jsonschema) is missing.
"""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("validate_json: the jsonschema module is missing "
          "(apt-get install python3-jsonschema)", file=sys.stderr)
    sys.exit(2)


def main():
    schema = json.load(open(sys.argv[1]))
    validator = jsonschema.Draft202012Validator(schema)
    validator.check_schema(schema)
    bad = 0
    with open(sys.argv[2]) as f:
        for n, line in enumerate(f, 1):
            for err in validator.iter_errors(json.loads(line)):
                where = "/".join(str(p) for p in err.absolute_path)
                print(f"{sys.argv[2]}:{n}: {where}: {err.message}",
                      file=sys.stderr)
                bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
