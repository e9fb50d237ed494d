#!/usr/bin/env python3
"""Tests of proto/gen/kpgen.py: schema parsing and validation errors (file:line: message),
and generation of the real and test schema sets.

    test_kpgen.py [--schemas DIR]   (DIR: the real schemas, default proto/schema)
"""

import argparse
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GEN = os.path.join(ROOT, "proto", "gen")
sys.path.insert(0, GEN)

import kpschema  # noqa: E402

REAL_SCHEMAS = os.path.join(ROOT, "proto", "schema")

API = """api Thing key=1 versions=0-3 flexible=2+
request
%s
response
  ErrorCode int16
"""


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def load(files):
    """Write {name: text} into a temp dir and load it; returns the Schema."""
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        return kpschema.load([d])


class Errors(unittest.TestCase):
    def bad(self, files, where, msg):
        with self.assertRaises(kpschema.SchemaError) as cm:
            load(files)
        text = str(cm.exception)
        self.assertTrue(text.startswith(where + ": "), "%r does not start with %r" % (text, where))
        self.assertIn(msg, text)

    def bad_req(self, body, line, msg):
        self.bad({"thing.kps": API % body}, "thing.kps:%d" % line, msg)

    def test_unknown_type(self):
        self.bad_req("  A int32\n  B in32", 4, "unknown type 'in32'")

    def test_unknown_struct(self):
        self.bad_req("  A []Nowhere", 3, "unknown type 'Nowhere'")

    def test_tag_not_flexible(self):
        self.bad_req("  A int32 tag=0", 3, "tagged field 'A' in non-flexible versions")
        self.bad_req("  A int32 1+ tag=0", 3, "tagged field 'A' in non-flexible versions")
        self.bad({"x.kps": "api X key=2 versions=0-1 flexible=none\nrequest\n  A int32 tag=0\n"
                           "response\n"}, "x.kps:3", "non-flexible")

    def test_tag_nested_not_flexible(self):
        self.bad_req("  A []S\n    B int32 tag=1", 4, "tagged field 'B'")

    def test_duplicate_tag(self):
        self.bad_req("  A int32 2+ tag=0\n  B int32 2+ tag=0", 4, "tag 0 already used by 'A'")

    def test_versions_outside(self):
        self.bad_req("  A int32 5+", 3, "outside the versions 0-3")
        self.bad_req("  A int32 1-7", 3, "outside the versions 0-3")

    def test_versions_syntax(self):
        self.bad_req("  A int32 3-1", 3, "bad versions")
        self.bad_req("  A int32 ignorable 2+", 3, "must follow the type")

    def test_nullable_type(self):
        self.bad_req("  A int32?", 3, "cannot be nullable")
        self.bad_req("  A uuid nullable=1+", 3, "cannot be nullable")

    def test_struct_twice(self):
        self.bad_req("  A []S\n    X int8\n  B S\n    Y int8", 5, "struct 'S' defined twice")

    def test_field_twice(self):
        self.bad_req("  A int8\n  A int16", 4, "field 'A' already defined")

    def test_indent(self):
        self.bad_req("  A []S\n     X int8", 4, "multiple of two")
        self.bad_req("  A []S\n      X int8", 4, "too deep")
        self.bad_req("  A int8\n    X int8", 4, "cannot have children")

    def test_default(self):
        self.bad_req("  A int8 default=200", 3, "out of range")
        self.bad_req("  A int32 default=x", 3, "bad default")
        self.bad_req("  A string default=null", 3, "default=null")
        self.bad_req("  A string nullable=2+ default=null", 3, "not nullable in every version")
        self.bad_req("  A bool default=1", 3, "bad default")
        self.bad_req("  A uuid default=1", 3, "only zero")
        self.bad_req("  A string default=abc", 3, "must be quoted")
        self.bad_req("  A []int32 default=x", 3, "only default=null")

    def test_attributes(self):
        self.bad_req("  A int32 frobnicate", 3, "unknown attribute 'frobnicate'")
        self.bad_req("  A int32 tag=x", 3, "bad tag")
        self.bad_req("  A int32 flexible=none", 3, "flexible=none is only supported")
        self.bad_req("  A string flexible=2+", 3, "only takes 'none'")
        self.bad_req("  A string? nullable=1+", 3, "both '?' and nullable=")
        self.bad_req('  A string doc "x', 3, "unterminated string")
        self.bad_req("  A\tstring", 3, "tab")

    def test_header_line(self):
        self.bad({"x.kps": "api X key=1 versions=0-3\nrequest\nresponse\n"}, "x.kps:1",
                 "missing flexible")
        self.bad({"x.kps": "api X key=1 versions=0-3 flexible=5+\nrequest\nresponse\n"},
                 "x.kps:1", "beyond the last version")
        self.bad({"x.kps": "api X versions=0-3 flexible=none\nrequest\nresponse\n"}, "x.kps:1",
                 "missing key")
        self.bad({"x.kps": "api X key=1 versions=0-3 flexible=none listeners=zk\nrequest\n"
                           "response\n"}, "x.kps:1", "unknown listener")
        self.bad({"x.kps": "thing X\n"}, "x.kps:1", "unknown file kind")
        self.bad({"x.kps": "api X key=1 versions=0-3 flexible=none\nrequest\n"}, "x.kps:2",
                 "missing 'response' section")

    def test_duplicate_key(self):
        a = "api A key=5 versions=0-0 flexible=none\nrequest\nresponse\n"
        b = "api B key=5 versions=0-0 flexible=none\nrequest\nresponse\n"
        self.bad({"a.kps": a, "b.kps": b}, "b.kps:1", "api key 5 already used by A")

    def test_record_file(self):
        self.bad({"r.kps": "record R versions=0 flexible=0+\nmessage\n"}, "r.kps:1",
                 "missing type=N")
        self.bad({"r.kps": "record R type=40000 versions=0 flexible=0+\nmessage\n"}, "r.kps:1",
                 "record type 40000 out of range")
        self.bad({"r.kps": "record R type=1 versions=0 flexible=0+ key=3\nmessage\n"},
                 "r.kps:1", "unknown attribute 'key'")
        self.bad({"r.kps": "record R type=1 versions=0 flexible=0+\nrequest\n"}, "r.kps:2",
                 "'request' section not allowed")
        self.bad({"r.kps": "record R type=1 versions=0-1 flexible=1+\nmessage\n"
                           "  A int32 tag=0\n"}, "r.kps:3", "tagged field 'A'")
        a = "record A type=3 versions=0 flexible=0+\nmessage\n"
        b = "record B type=3 versions=0 flexible=0+\nmessage\n"
        self.bad({"a.kps": a, "b.kps": b}, "b.kps:1", "record type 3 already used by A")
        c = "record A type=4 versions=0 flexible=0+\nmessage\n"
        self.bad({"a.kps": a, "c.kps": c}, "c.kps:1", "message A already defined")

    def test_data_file_errors(self):
        self.bad({"d.kps": "data D versions=0 flexible=0+ type=1\nmessage\n"}, "d.kps:1",
                 "unknown attribute 'type'")
        self.bad({"d.kps": "data d versions=0 flexible=0+\nmessage\n"}, "d.kps:1",
                 "data needs a CamelCase name")
        self.bad({"d.kps": "data D versions=0 flexible=0+\n", "e.kps":
                  "data D versions=0 flexible=0+\nmessage\n"}, "d.kps:1", "missing 'message'")
        a = "data D versions=0 flexible=0+\nmessage\n"
        self.bad({"a.kps": a, "b.kps": a}, "b.kps:1", "message D already defined")

    def test_errors_file(self):
        self.bad({"errors.kps": 'errors\n  0 NONE none "ok"\n  0 OTHER none "x"\n'},
                 "errors.kps:3", "already defined")
        self.bad({"errors.kps": 'errors\n  1 X maybe "x"\n'}, "errors.kps:2", "bad error class")
        self.bad({"errors.kps": 'errors\n  1 X none "x"\n'}, "errors.kps:2", "class 'none'")
        self.bad({"errors.kps": 'errors\n  1 lower fatal "x"\n'}, "errors.kps:2", "bad error name")

    def test_constants_file(self):
        self.bad({"p.kps": "constants\nA 1\nA 2\n"}, "p.kps:3", "already defined")
        self.bad({"p.kps": "constants\nA one\n"}, "p.kps:2", "bad constant value")

    def test_shared_struct_tag_in_nonflexible_user(self):
        s = "structs\n\nstruct P\n  X int32 tag=0\n"
        a = "api A key=1 versions=0-1 flexible=none\nrequest\n  Pt P\nresponse\n"
        self.bad({"s.kps": s, "a.kps": a}, "s.kps:4", "tagged field 'X'")


class Good(unittest.TestCase):
    def test_features(self):
        s = load({
            "s.kps": "structs\nstruct P doc \"p\"\n  X int32\n",
            "a.kps": API % ("  A []S 1+ nullable=2+\n    B string key\n  C S 2+ tag=0 ignorable\n"
                            "  D P\n  E string? default=null flexible=none\n"
                            '  F string default="a b#c" doc "with # inside"\n'
                            "  G records? 3+ tag=1 sensitive provisional # comment\n"),
            "e.kps": 'errors\n   0 NONE none "ok"\n  -1 UNKNOWN_SERVER_ERROR fatal "x" provisional\n',
            "c.kps": 'constants\nK 0x10 provisional doc "k"\n',
        })
        self.assertEqual(len(s.apis), 1)
        req = s.apis[0].request
        names = [f.name for f in req.root.fields]
        self.assertEqual(names, ["A", "C", "D", "E", "F", "G"])
        self.assertTrue(req.root.fields[3].flexnone)
        self.assertEqual(req.root.fields[4].dflt, ("str", "a b#c"))
        self.assertTrue(req.root.fields[5].sensitive)
        self.assertEqual(req.root.fields[1].tref.sdef.name, "S")  # reuse of S defined by A
        self.assertEqual([e.code for e in s.errors], [-1, 0])
        self.assertEqual(s.constants[0].value, 16)

    def test_records_in_subdirectory(self):
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "metadata"))
            with open(os.path.join(d, "metadata", "r.kps"), "w") as f:
                f.write("record ZRecord type=7 versions=0-1 flexible=0+\ndoc \"z\"\nmessage\n"
                        "  A []E\n    N string key\n  B int8 1+ tag=0 default=-1\n")
            with open(os.path.join(d, "metadata", "q.kps"), "w") as f:
                f.write("record QRecord type=2 versions=0 flexible=0+\nmessage\n")
            with open(os.path.join(d, "a.kps"), "w") as f:
                f.write(API % "  A int32")
            s = kpschema.load([d])
        self.assertEqual([r.name for r in s.records], ["QRecord", "ZRecord"])
        r = s.records[1]
        self.assertEqual((r.kind, r.rtype, r.versions.lo, r.versions.hi, r.flex),
                         ("record", 7, 0, 1, 0))
        self.assertEqual(r.doc, "z")
        self.assertEqual(r.root.fields[0].tref.elem.sdef.cname, "kp_ZRecord_E")
        self.assertIs(s.messages()[-1], r)  # records come after every API message

    def test_data_file(self):
        s = load({"d.kps": "data PrincipalThing versions=0-1 flexible=1+\nmessage\n"
                           "  Name string\n  Token bool 1+ tag=0\n",
                  "a.kps": API % "  A int32"})
        self.assertEqual([d.name for d in s.datas], ["PrincipalThing"])
        d = s.datas[0]
        self.assertEqual((d.kind, d.api, d.flex), ("data", None, 1))
        self.assertIs(s.messages()[-1], d)

    def test_response_reuses_request_struct(self):
        s = load({"a.kps": "api A key=1 versions=0-0 flexible=0+\nrequest\n  T []Topic\n"
                           "    Name string\nresponse\n  T []Topic\n"})
        self.assertIs(s.apis[0].response.root.fields[0].tref.elem.sdef,
                      s.apis[0].request.root.fields[0].tref.elem.sdef)


class Generate(unittest.TestCase):
    def run_gen(self, schemas, out):
        return subprocess.run([sys.executable, os.path.join(GEN, "kpgen.py"), "--schemas",
                               schemas, "--out", out], capture_output=True, text=True)

    def test_cli_error_format(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "fetch.kps"), "w") as f:
                f.write(API % "  A in32")
            r = self.run_gen(d, os.path.join(d, "out"))
            self.assertEqual(r.returncode, 1)
            self.assertEqual(r.stderr.strip(), "kpgen: fetch.kps:3: unknown type 'in32'")

    def check_set(self, schemas):
        with tempfile.TemporaryDirectory() as d:
            r = self.run_gen(schemas, d)
            self.assertEqual(r.returncode, 0, r.stderr)
            files = sorted(os.listdir(d))
            self.assertEqual(files, ["kp_errcode.h", "kp_msgs.c", "kp_msgs.h",
                                     "kp_msgs_testfill.c"])
            before = {n: (read(os.path.join(d, n)), os.stat(os.path.join(d, n)).st_mtime_ns)
                      for n in files}
            r = self.run_gen(schemas, d)
            self.assertEqual(r.returncode, 0, r.stderr)
            for n in files:
                p = os.path.join(d, n)
                self.assertEqual(read(p), before[n][0], "output not deterministic: " + n)
                self.assertEqual(os.stat(p).st_mtime_ns, before[n][1], "rewrote unchanged " + n)

    def test_test_schemas(self):
        self.check_set(os.path.join(HERE, "schemas"))

    def test_real_schemas(self):
        if not os.path.isdir(REAL_SCHEMAS) or not any(
                n.endswith(".kps") for n in os.listdir(REAL_SCHEMAS)):
            self.skipTest("no real schemas yet")
        self.check_set(REAL_SCHEMAS)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--schemas")
    args, rest = ap.parse_known_args()
    if args.schemas:
        REAL_SCHEMAS = args.schemas
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=1)
