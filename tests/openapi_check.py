#!/usr/bin/env python3
"""openapi_check.py - validates recorded HTTP exchanges against docs/openapi.json.

    openapi_check.py DOC EXCHANGES.jsonl...

Each line of an exchanges file is one response a test received:
{"suite", "method", "path", "status", "content_type", "body"?} (tests/e2e_support.h
writes them when RETRYD_TEST_EXCHANGES is set). For each one the path is matched to a
path template of the document (a literal path before a templated one), the operation is
the method's (HEAD: GET's), and the response is the one documented for that exact
status; a path no template matches, or a method the path does not have, takes the
document's `x-unrouted-responses`. A status with no documented response is a failure;
so is a Content-Type the response does not list, a body on a response documented
without content, and a JSON body the schema refuses. Schemas are checked with Debian's
python3-jsonschema (draft 2020-12, OpenAPI 3.1's dialect); no validation is hand-written
here. Before the exchanges, the document itself is checked: every schema is a valid
2020-12 schema and every $ref resolves.

Prints one line per failure (at most 50, then a count) and a summary; exits 1 on any
failure, 2 on bad usage or an unreadable document.
"""
import json
import re
import sys
import warnings

warnings.filterwarnings("ignore", category=DeprecationWarning)
import jsonschema  # noqa: E402  (python3-jsonschema)
from jsonschema import Draft202012Validator, RefResolver  # noqa: E402

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


def walk_refs(node, out):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            out.append(node["$ref"])
        for v in node.values():
            walk_refs(v, out)
    elif isinstance(node, list):
        for v in node:
            walk_refs(v, out)


class Document:
    def __init__(self, doc):
        self.doc = doc
        self.resolver = RefResolver.from_schema(doc)
        self.validators = {}
        templates = []
        for tpl in doc.get("paths", {}):
            parts = re.split(r"(\{[^}]+\})", tpl)
            rx = "".join("[^/]*" if p.startswith("{") else re.escape(p) for p in parts)
            templates.append((tpl.count("{"), tpl, re.compile("^" + rx + "$")))
        self.templates = sorted(templates)  # literal paths first

    def self_check(self):
        errors = []
        for name, schema in self.doc.get("components", {}).get("schemas", {}).items():
            try:
                Draft202012Validator.check_schema(schema)
            except jsonschema.SchemaError as e:
                errors.append("components/schemas/%s is not a valid schema: %s" % (name, e.message))
        refs = []
        walk_refs(self.doc, refs)
        for ref in sorted(set(refs)):
            try:
                self.resolver.resolve(ref)
            except jsonschema.RefResolutionError as e:
                errors.append("$ref %s does not resolve: %s" % (ref, e))
        return errors

    def deref(self, node):
        while isinstance(node, dict) and "$ref" in node:
            node = self.resolver.resolve(node["$ref"])[1]
        return node

    def responses_for(self, method, path):
        """(where, responses) for a request: the operation's, or the unrouted ones."""
        path = path.split("?", 1)[0]
        m = method.lower()
        if m == "head":
            m = "get"
        for _, tpl, rx in self.templates:
            if rx.match(path):
                item = self.doc["paths"][tpl]
                if m in item:
                    return "%s %s" % (m.upper(), tpl), item[m].get("responses", {})
                return "%s %s (no such operation)" % (m.upper(), tpl), self.doc.get("x-unrouted-responses", {})
        return "%s (no path template)" % path, self.doc.get("x-unrouted-responses", {})

    def validator(self, schema):
        key = json.dumps(schema, sort_keys=True)
        v = self.validators.get(key)
        if v is None:
            v = self.validators[key] = Draft202012Validator(schema, resolver=self.resolver)
        return v

    def check(self, ex):
        """A list of what is wrong with one exchange (empty: it matches)."""
        where, responses = self.responses_for(ex["method"], ex["path"])
        status = str(ex["status"])
        if status not in responses:
            return ["%s: status %s is not documented (documented: %s)"
                    % (where, status, ", ".join(sorted(responses)) or "none")]
        resp = self.deref(responses[status])
        content = resp.get("content")
        ctype = (ex.get("content_type") or "").split(";", 1)[0].strip().lower()
        if not content:
            if ctype or ex.get("body"):
                return ["%s -> %s: documented without a body, got %s" % (where, status, ctype or "a body")]
            return []
        if ex["method"].upper() == "HEAD":
            return []
        if ctype not in content:
            return ["%s -> %s: Content-Type %r is not documented (documented: %s)"
                    % (where, status, ctype, ", ".join(content))]
        schema = content[ctype].get("schema")
        if schema is None or "json" not in ctype:
            return []
        try:
            body = json.loads(ex.get("body", ""))
        except ValueError as e:
            return ["%s -> %s: the body is not JSON (%s): %.200s" % (where, status, e, ex.get("body", ""))]
        errs = []
        for err in sorted(self.validator(schema).iter_errors(body), key=lambda e: list(e.absolute_path)):
            pointer = "/" + "/".join(str(p) for p in err.absolute_path)
            errs.append("%s -> %s: at %s: %s" % (where, status, pointer, err.message[:300]))
        return errs


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            doc = Document(json.load(f))
    except (OSError, ValueError) as e:
        print("openapi_check: cannot read %s: %s" % (argv[1], e))
        return 2
    failures = doc.self_check()
    checked = distinct = 0
    seen = set()
    for name in argv[2:]:
        with open(name, encoding="utf-8", errors="surrogateescape") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                checked += 1
                try:
                    ex = json.loads(line)
                except ValueError as e:
                    failures.append("%s:%d: not a JSON line: %s" % (name, lineno, e))
                    continue
                where, _ = doc.responses_for(ex.get("method", ""), ex.get("path", ""))
                key = (where, ex.get("status"), ex.get("content_type"), ex.get("body"))
                if key in seen:
                    continue
                seen.add(key)
                distinct += 1
                for msg in doc.check(ex):
                    failures.append("%s: %s %s: %s" % (ex.get("suite", "?"), ex.get("method"),
                                                         ex.get("path", "")[:120], msg))
    for msg in failures[:50]:
        print("openapi_check: " + msg)
    if len(failures) > 50:
        print("openapi_check: ... and %d more" % (len(failures) - 50))
    print("openapi_check: %d responses (%d distinct) checked against %s (jsonschema %s): %d failures"
          % (checked, distinct, argv[1], getattr(jsonschema, "__version__", "?"), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
