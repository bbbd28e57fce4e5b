"""Every shipped adapter profile validates against hardware/adapters/schema.json (an independent validator)."""
import glob
import json
import os

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADAPTERS = os.path.join(ROOT, "hardware", "adapters")


def test_every_profile_matches_the_schema():
    schema = json.load(open(os.path.join(ADAPTERS, "schema.json")))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    profiles = [p for p in glob.glob(os.path.join(ADAPTERS, "*.json")) if not p.endswith("schema.json")]
    assert len(profiles) >= 9
    for path in profiles:
        errors = list(validator.iter_errors(json.load(open(path))))
        assert not errors, f"{path}: {[e.message for e in errors]}"


def test_the_schema_rejects_what_the_loader_rejects():
    validator = jsonschema.Draft202012Validator(json.load(open(os.path.join(ADAPTERS, "schema.json"))))
    base = {"id": "x", "name": "X", "match": {"usb": ["0a12:0001"]}, "transport": {"kind": "userchannel"}}
    assert not list(validator.iter_errors(base))
    for broken in [
        {**base, "id": "Bad Id"},
        {**base, "match": {"usb": ["0A12-0001"]}},
        {**base, "transport": {"kind": "uart", "device": "/dev/ttyS0", "baud": 12345}},
        {**base, "quirks": {"maxACLBuffers": 0}},
        {**base, "colour": 1},
    ]:
        assert list(validator.iter_errors(broken)), broken
