"""kpschema -- parser and validator for kmirror `.kps` protocol schema files.

The format is described in docs/protocol.md. This module only reads and checks the files and
builds a model (Api, Message, StructDef, Field, TypeRef, ...); kpgen.py turns the model into C.

Standard library only.
"""

import os
import re

PRIMS = {
    # name: (C type, fixed wire size or None, nullable-capable)
    "bool": ("bool", 1, False),
    "int8": ("int8_t", 1, False),
    "int16": ("int16_t", 2, False),
    "uint16": ("uint16_t", 2, False),
    "int32": ("int32_t", 4, False),
    "int64": ("int64_t", 8, False),
    "uint32": ("uint32_t", 4, False),
    "float64": ("double", 8, False),
    "string": ("kp_str_t", None, True),
    "bytes": ("kp_bytes_t", None, True),
    "records": ("kp_bytes_t", None, True),
    "uuid": ("kp_uuid_t", 16, False),
}

INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint32": (0, (1 << 32) - 1),
}

NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
UPPER_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
VERS_RE = re.compile(r"^(\d+)(\+|-(\d+))?$")
# Tags are unsigned varints on the wire; Kafka keeps them within int32.
MAX_TAG = (1 << 31) - 1
MAX_VERSION = (1 << 15) - 1

FIELD_FLAGS = ("ignorable", "key", "sensitive", "provisional")


class SchemaError(Exception):
    """A problem in a schema file, reported as `file:line: message`."""

    def __init__(self, where, msg):
        super().__init__("%s: %s" % (where, msg) if where else msg)


class Loc:
    def __init__(self, path, line):
        self.path = path
        self.line = line

    def __str__(self):
        return "%s:%d" % (os.path.basename(self.path), self.line)


class Versions:
    """A closed range [lo, hi]; hi None means open-ended (N+)."""

    def __init__(self, lo, hi):
        self.lo = lo
        self.hi = hi

    @staticmethod
    def parse(text, loc, what="versions"):
        m = VERS_RE.match(text)
        if not m:
            raise SchemaError(loc, "bad %s '%s' (expected N, N+ or N-M)" % (what, text))
        lo = int(m.group(1))
        if m.group(2) is None:
            hi = lo
        elif m.group(2) == "+":
            hi = None
        else:
            hi = int(m.group(3))
            if hi < lo:
                raise SchemaError(loc, "bad %s '%s': %d > %d" % (what, text, lo, hi))
        if lo > MAX_VERSION or (hi is not None and hi > MAX_VERSION):
            raise SchemaError(loc, "bad %s '%s': larger than %d" % (what, text, MAX_VERSION))
        return Versions(lo, hi)

    def contains(self, v):
        return v >= self.lo and (self.hi is None or v <= self.hi)

    def intersect(self, other):
        lo = max(self.lo, other.lo)
        if self.hi is None:
            hi = other.hi
        elif other.hi is None:
            hi = self.hi
        else:
            hi = min(self.hi, other.hi)
        if hi is not None and hi < lo:
            return None
        return Versions(lo, hi)

    def hull(self, other):
        if other is None:
            return self
        hi = None if self.hi is None or other.hi is None else max(self.hi, other.hi)
        return Versions(min(self.lo, other.lo), hi)

    def within(self, other):
        """True if every version of self is in other."""
        if self.lo < other.lo:
            return False
        if other.hi is None:
            return True
        return self.hi is not None and self.hi <= other.hi

    def __str__(self):
        if self.hi is None:
            return "%d+" % self.lo
        if self.hi == self.lo:
            return "%d" % self.lo
        return "%d-%d" % (self.lo, self.hi)


class TypeRef:
    """kind: 'prim' (name), 'struct' (name, resolved to sdef), 'array' (elem: TypeRef)."""

    def __init__(self, kind, name=None, elem=None):
        self.kind = kind
        self.name = name
        self.elem = elem
        self.sdef = None

    def nullable_capable(self):
        if self.kind == "prim":
            return PRIMS[self.name][2]
        return True  # arrays and structs

    def __str__(self):
        if self.kind == "array":
            return "[]" + str(self.elem)
        return self.name


class Field:
    def __init__(self, loc, name, tref):
        self.loc = loc
        self.name = name
        self.tref = tref
        self.versions = None  # Versions or None (= every version of the message)
        self.nullable = None  # Versions or None (not nullable)
        self.nullable_all = False  # the `?` suffix
        self.tag = None
        self.default = None  # raw token text (str) or ('str', value) for quoted strings
        self.ignorable = False
        self.key = False
        self.sensitive = False
        self.provisional = False
        self.flexnone = False
        self.doc = None
        self.children = []  # inline struct definition
        self.indent = 0
        # filled in by resolve()
        self.dflt = None  # parsed default (see parse_default)


class StructDef:
    def __init__(self, loc, name, owner, fields, shared):
        self.loc = loc
        self.name = name
        self.owner = owner  # Message (nested struct) or None (shared struct)
        self.fields = fields
        self.shared = shared
        self.doc = None
        self.is_root = False
        self.message = None  # the Message when is_root
        # computed
        self.vrange = None  # hull of the message versions in which the struct is reached
        self.used = False
        self.flexible_any = False

    @property
    def cname(self):
        if self.is_root or self.shared:
            return "kp_%s" % self.name
        return "kp_%s_%s" % (self.owner.name, self.name)


class Message:
    def __init__(self, loc, name, kind, api, versions, flex):
        self.loc = loc
        self.name = name
        self.kind = kind  # 'request', 'response', 'header', 'record', 'data'
        self.api = api
        self.rtype = None  # record type id (kind 'record')
        self.versions = versions
        self.flex = flex  # first flexible version or None
        self.structs = {}  # name -> StructDef defined (with children) in this message
        self.root = None  # StructDef
        self.doc = None
        self.file = None


class Api:
    def __init__(self, loc, name, key, versions, flex):
        self.loc = loc
        self.name = name
        self.key = key
        self.versions = versions
        self.flex = flex
        self.listeners = None
        self.provisional = False
        self.doc = None
        self.request = None
        self.response = None


class ErrorCode:
    def __init__(self, loc, code, name, klass, msg, provisional):
        self.loc = loc
        self.code = code
        self.name = name
        self.klass = klass
        self.msg = msg
        self.provisional = provisional


class Constant:
    def __init__(self, loc, name, value, provisional, doc):
        self.loc = loc
        self.name = name
        self.value = value  # int or ('str', text)
        self.provisional = provisional
        self.doc = doc


class Schema:
    def __init__(self):
        self.apis = []
        self.headers = []  # Messages
        self.records = []  # Messages of kind 'record' (KRaft metadata records)
        self.datas = []  # Messages of kind 'data' (standalone versioned messages)
        self.shared = {}  # name -> StructDef
        self.errors = []
        self.constants = []
        self.files = []

    def messages(self):
        out = list(self.headers)
        for a in self.apis:
            out.append(a.request)
            out.append(a.response)
        out.extend(self.records)
        out.extend(self.datas)
        return out


# ----------------------------------------------------------------------------------------------
# Lexing


class Tok:
    """A token: plain text, optionally followed by one quoted string (`doc`, `default="x"`)."""

    def __init__(self, text, quoted=None):
        self.text = text
        self.quoted = quoted

    def __repr__(self):
        return "Tok(%r, %r)" % (self.text, self.quoted)


def tokenize(line, loc):
    toks = []
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if c == " ":
            i += 1
            continue
        if c == "\t":
            raise SchemaError(loc, "tab character (use spaces)")
        if c == "#":
            break
        text = []
        quoted = None
        while i < n and line[i] not in " \t":
            c = line[i]
            if c == "#":
                break
            if c == '"':
                j = i + 1
                s = []
                while True:
                    if j >= n:
                        raise SchemaError(loc, "unterminated string")
                    cj = line[j]
                    if cj == '"':
                        break
                    if cj == "\\":
                        if j + 1 >= n:
                            raise SchemaError(loc, "unterminated string")
                        e = line[j + 1]
                        if e in '"\\':
                            s.append(e)
                        elif e == "n":
                            s.append("\n")
                        elif e == "t":
                            s.append("\t")
                        else:
                            raise SchemaError(loc, "unknown escape '\\%s' in string" % e)
                        j += 2
                        continue
                    s.append(cj)
                    j += 1
                quoted = "".join(s)
                i = j + 1
                if i < n and line[i] not in " \t#":
                    raise SchemaError(loc, "text after a closing quote")
                break
            text.append(c)
            i += 1
        toks.append(Tok("".join(text), quoted))
        if i < n and line[i] == "#":
            break
    return toks


def lex_file(path):
    """Yield (loc, indent, tokens) for every non-blank line."""
    with open(path, encoding="utf-8") as f:
        data = f.read()
    out = []
    for lineno, raw in enumerate(data.split("\n"), 1):
        loc = Loc(path, lineno)
        line = raw.rstrip("\r")
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("\t") or "\t" in line[: len(line) - len(stripped) + 1]:
            raise SchemaError(loc, "tab character in indentation (use spaces)")
        indent = len(line) - len(stripped)
        toks = tokenize(line, loc)
        if not toks:
            continue
        out.append((loc, indent, toks))
    return out


def parse_kv(tok):
    if "=" in tok.text:
        k, v = tok.text.split("=", 1)
        return k, v
    return None, None


def parse_int(text, loc, what):
    try:
        return int(text, 0)
    except ValueError:
        raise SchemaError(loc, "bad %s '%s' (expected an integer)" % (what, text)) from None


def take_doc(toks, i, loc):
    """toks[i] is `doc` or `doc="..."`; returns (text, next index)."""
    t = toks[i]
    if t.text == "doc=" and t.quoted is not None:
        return t.quoted, i + 1
    if t.text == "doc" and t.quoted is None:
        if i + 1 < len(toks) and toks[i + 1].text == "" and toks[i + 1].quoted is not None:
            return toks[i + 1].quoted, i + 2
    raise SchemaError(loc, 'doc needs a quoted string: doc "..."')


# ----------------------------------------------------------------------------------------------
# Parsing


def parse_type(text, loc):
    nullable = False
    if text.endswith("?"):
        nullable = True
        text = text[:-1]
    if text.startswith("[]"):
        et = text[2:]
        if not et:
            raise SchemaError(loc, "missing element type after '[]'")
        if et.startswith("[]"):
            raise SchemaError(loc, "arrays of arrays are not supported ('%s')" % text)
        if et.endswith("?"):
            raise SchemaError(loc, "array elements cannot be nullable ('%s')" % text)
        elem = TypeRef("prim", et) if et in PRIMS else TypeRef("struct", et)
        return TypeRef("array", elem=elem), nullable
    if text in PRIMS:
        return TypeRef("prim", text), nullable
    return TypeRef("struct", text), nullable


def parse_field(loc, indent, toks):
    if len(toks) < 2:
        raise SchemaError(loc, "field line needs a name and a type")
    name = toks[0].text
    if toks[0].quoted is not None or not NAME_RE.match(name):
        raise SchemaError(loc, "bad field name '%s' (CamelCase letters and digits)" % name)
    if toks[1].quoted is not None:
        raise SchemaError(loc, "bad type for field '%s'" % name)
    tref, qnull = parse_type(toks[1].text, loc)
    f = Field(loc, name, tref)
    f.indent = indent
    f.nullable_all = qnull
    i = 2
    if i < len(toks) and toks[i].quoted is None and VERS_RE.match(toks[i].text):
        f.versions = Versions.parse(toks[i].text, loc)
        i += 1
    seen = set()
    while i < len(toks):
        t = toks[i]
        if t.text in ("doc", "doc="):
            if "doc" in seen:
                raise SchemaError(loc, "doc given twice")
            seen.add("doc")
            f.doc, i = take_doc(toks, i, loc)
            continue
        k, v = parse_kv(t)
        if k is None:
            if t.quoted is not None:
                raise SchemaError(loc, "unexpected string (did you mean doc \"...\"?)")
            if t.text in FIELD_FLAGS:
                if t.text in seen:
                    raise SchemaError(loc, "'%s' given twice" % t.text)
                seen.add(t.text)
                setattr(f, t.text, True)
                i += 1
                continue
            if VERS_RE.match(t.text):
                raise SchemaError(loc, "versions '%s' must follow the type" % t.text)
            raise SchemaError(loc, "unknown attribute '%s'" % t.text)
        if k in seen:
            raise SchemaError(loc, "'%s' given twice" % k)
        seen.add(k)
        if k == "tag":
            if t.quoted is not None:
                raise SchemaError(loc, "bad tag")
            if not re.match(r"^\d+$", v):
                raise SchemaError(loc, "bad tag '%s' (expected a non-negative integer)" % v)
            f.tag = int(v)
            if f.tag > MAX_TAG:
                raise SchemaError(loc, "tag %d too large" % f.tag)
        elif k == "default":
            if t.quoted is not None:
                if v:
                    raise SchemaError(loc, "bad default")
                f.default = ("str", t.quoted)
            else:
                if not v:
                    raise SchemaError(loc, "empty default (use default=\"\" for a string)")
                f.default = v
        elif k == "nullable":
            f.nullable = Versions.parse(v, loc, "nullable versions")
        elif k == "flexible":
            if v != "none":
                raise SchemaError(loc, "field attribute flexible= only takes 'none'")
            f.flexnone = True
        else:
            raise SchemaError(loc, "unknown attribute '%s'" % k)
        i += 1
    if qnull and f.nullable is not None:
        raise SchemaError(loc, "field '%s' has both '?' and nullable=" % name)
    return f


def build_tree(lines, idx, base_indent, loc_parent):
    """Parse field lines with indent >= base_indent starting at idx into a list of fields
    (children attached). Returns (fields, next idx)."""
    fields = []
    while idx < len(lines):
        loc, indent, toks = lines[idx]
        if indent < base_indent:
            break
        if indent % 2:
            raise SchemaError(loc, "indentation must be a multiple of two spaces")
        if indent > base_indent:
            if not fields:
                raise SchemaError(loc, "unexpected indentation")
            raise SchemaError(loc, "indented too deep (children go two spaces deeper)")
        f = parse_field(loc, indent, toks)
        idx += 1
        if idx < len(lines) and lines[idx][1] > indent:
            cloc, cind, _ = lines[idx]
            if cind != indent + 2:
                if cind % 2:
                    raise SchemaError(cloc, "indentation must be a multiple of two spaces")
                raise SchemaError(cloc, "indented too deep (children go two spaces deeper)")
            f.children, idx = build_tree(lines, idx, indent + 2, loc)
        fields.append(f)
    return fields, idx


def parse_header_attrs(toks, loc, allowed, flags=()):
    attrs = {}
    doc = None
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.text in ("doc", "doc="):
            doc, i = take_doc(toks, i, loc)
            continue
        k, v = parse_kv(t)
        if k is None:
            if t.text in flags and t.quoted is None:
                if t.text in attrs:
                    raise SchemaError(loc, "'%s' given twice" % t.text)
                attrs[t.text] = True
                i += 1
                continue
            raise SchemaError(loc, "unknown attribute '%s'" % (t.text or '"%s"' % t.quoted))
        if k not in allowed or t.quoted is not None:
            raise SchemaError(loc, "unknown attribute '%s'" % k)
        if k in attrs:
            raise SchemaError(loc, "'%s' given twice" % k)
        attrs[k] = v
        i += 1
    return attrs, doc


def parse_msg_versions(attrs, loc):
    if "versions" not in attrs:
        raise SchemaError(loc, "missing versions=MIN-MAX")
    vs = Versions.parse(attrs["versions"], loc)
    if vs.hi is None:
        raise SchemaError(loc, "versions= needs an upper bound (MIN-MAX)")
    if "flexible" not in attrs:
        raise SchemaError(loc, "missing flexible=F+ (or flexible=none)")
    fl = attrs["flexible"]
    if fl == "none":
        flex = None
    else:
        m = re.match(r"^(\d+)\+$", fl)
        if not m:
            raise SchemaError(loc, "bad flexible '%s' (expected F+ or none)" % fl)
        flex = int(m.group(1))
        if flex > vs.hi:
            raise SchemaError(
                loc, "flexible=%s is beyond the last version %d (use flexible=none)" % (fl, vs.hi)
            )
    return vs, flex


def parse_doc_line(lines, idx):
    if idx < len(lines):
        loc, indent, toks = lines[idx]
        if indent == 0 and toks[0].text in ("doc", "doc="):
            doc, j = take_doc(toks, 0, loc)
            if j != len(toks):
                raise SchemaError(loc, "text after doc string")
            return doc, idx + 1
    return None, idx


def parse_sections(lines, idx, names, path):
    """Parse `section` keyword lines followed by fields. Returns {name: (loc, fields, doc)}."""
    out = {}
    while idx < len(lines):
        loc, indent, toks = lines[idx]
        if indent != 0:
            raise SchemaError(loc, "field outside a section (expected %s)" % " or ".join(names))
        kw = toks[0].text
        if kw not in names or toks[0].quoted is not None:
            if kw in ("request", "response", "message", "struct"):
                raise SchemaError(loc, "'%s' section not allowed in this file" % kw)
            raise SchemaError(loc, "expected %s, got '%s'" % (" or ".join(names), kw))
        if kw in out:
            raise SchemaError(loc, "second '%s' section" % kw)
        doc = None
        if len(toks) > 1:
            doc, j = take_doc(toks, 1, loc)
            if j != len(toks):
                raise SchemaError(loc, "text after doc string")
        idx += 1
        if idx < len(lines) and lines[idx][1] > 0 and lines[idx][1] != 2:
            raise SchemaError(lines[idx][0], "fields of a section are indented two spaces")
        fields, idx = build_tree(lines, idx, 2, loc)
        out[kw] = (loc, fields, doc)
    for n in names:
        if n not in out:
            raise SchemaError(Loc(path, lines[-1][0].line if lines else 1), "missing '%s' section" % n)
    return out


def parse_file(path, schema):
    lines = lex_file(path)
    if not lines:
        raise SchemaError(Loc(path, 1), "empty schema file")
    loc, indent, toks = lines[0]
    kw = toks[0].text
    if indent != 0:
        raise SchemaError(loc, "the first line must not be indented")
    if kw == "api":
        if len(toks) < 2 or not NAME_RE.match(toks[1].text):
            raise SchemaError(loc, "api needs a CamelCase name: api NAME key=N ...")
        attrs, doc = parse_header_attrs(
            toks[2:], loc, ("key", "versions", "flexible", "listeners"), ("provisional",)
        )
        if "key" not in attrs:
            raise SchemaError(loc, "missing key=N")
        key = parse_int(attrs["key"], loc, "api key")
        if key < 0 or key > 32767:
            raise SchemaError(loc, "api key %d out of range" % key)
        vs, flex = parse_msg_versions(attrs, loc)
        api = Api(loc, toks[1].text, key, vs, flex)
        api.provisional = bool(attrs.get("provisional"))
        if "listeners" in attrs:
            ls = attrs["listeners"].split(",")
            for l in ls:
                if l not in ("broker", "controller"):
                    raise SchemaError(loc, "unknown listener '%s' (broker, controller)" % l)
            api.listeners = ls
        d2, idx = parse_doc_line(lines, 1)
        api.doc = doc or d2
        secs = parse_sections(lines, idx, ("request", "response"), path)
        for kind in ("request", "response"):
            sloc, fields, sdoc = secs[kind]
            m = Message(sloc, api.name + kind.capitalize(), kind, api, vs, flex)
            m.doc = sdoc
            m.file = path
            m.root = StructDef(sloc, m.name, m, fields, False)
            m.root.is_root = True
            m.root.message = m
            setattr(api, kind, m)
        schema.apis.append(api)
    elif kw in ("header", "data"):
        if len(toks) < 2 or not NAME_RE.match(toks[1].text):
            raise SchemaError(loc, "%s needs a CamelCase name: %s NAME versions=..." % (kw, kw))
        attrs, doc = parse_header_attrs(toks[2:], loc, ("versions", "flexible"))
        vs, flex = parse_msg_versions(attrs, loc)
        d2, idx = parse_doc_line(lines, 1)
        secs = parse_sections(lines, idx, ("message",), path)
        sloc, fields, sdoc = secs["message"]
        m = Message(loc, toks[1].text, kw, None, vs, flex)
        m.doc = doc or d2 or sdoc
        m.file = path
        m.root = StructDef(sloc, m.name, m, fields, False)
        m.root.is_root = True
        m.root.message = m
        (schema.headers if kw == "header" else schema.datas).append(m)
    elif kw == "record":
        if len(toks) < 2 or not NAME_RE.match(toks[1].text):
            raise SchemaError(loc, "record needs a CamelCase name: record NAME type=N ...")
        attrs, doc = parse_header_attrs(toks[2:], loc, ("type", "versions", "flexible"))
        if "type" not in attrs:
            raise SchemaError(loc, "missing type=N")
        rtype = parse_int(attrs["type"], loc, "record type")
        if rtype < 0 or rtype > 32767:
            raise SchemaError(loc, "record type %d out of range" % rtype)
        vs, flex = parse_msg_versions(attrs, loc)
        d2, idx = parse_doc_line(lines, 1)
        secs = parse_sections(lines, idx, ("message",), path)
        sloc, fields, sdoc = secs["message"]
        m = Message(loc, toks[1].text, "record", None, vs, flex)
        m.rtype = rtype
        m.doc = doc or d2 or sdoc
        m.file = path
        m.root = StructDef(sloc, m.name, m, fields, False)
        m.root.is_root = True
        m.root.message = m
        schema.records.append(m)
    elif kw == "structs":
        if len(toks) != 1:
            raise SchemaError(loc, "'structs' takes no attributes")
        idx = 1
        while idx < len(lines):
            sloc, sind, stoks = lines[idx]
            if sind != 0 or stoks[0].text != "struct":
                raise SchemaError(sloc, "expected 'struct NAME'")
            if len(stoks) < 2 or not NAME_RE.match(stoks[1].text):
                raise SchemaError(sloc, "struct needs a CamelCase name")
            doc = None
            if len(stoks) > 2:
                doc, j = take_doc(stoks, 2, sloc)
                if j != len(stoks):
                    raise SchemaError(sloc, "text after doc string")
            idx += 1
            if idx < len(lines) and lines[idx][1] > 0 and lines[idx][1] != 2:
                raise SchemaError(lines[idx][0], "fields of a struct are indented two spaces")
            fields, idx = build_tree(lines, idx, 2, sloc)
            if not fields:
                raise SchemaError(sloc, "struct '%s' has no fields" % stoks[1].text)
            sd = StructDef(sloc, stoks[1].text, None, fields, True)
            sd.doc = doc
            add_shared(schema, sd)
    elif kw == "errors":
        parse_errors(lines, schema)
    elif kw == "constants":
        parse_constants(lines, schema)
    else:
        raise SchemaError(
            loc,
            "unknown file kind '%s' (expected api, header, record, data, structs, errors or "
            "constants)"
            % kw,
        )


def add_shared(schema, sd):
    if sd.name in schema.shared:
        raise SchemaError(
            sd.loc, "struct '%s' already defined at %s" % (sd.name, schema.shared[sd.name].loc)
        )
    schema.shared[sd.name] = sd
    # Inline children of a shared struct are shared structs too (kp_<Name>_t).
    for f in sd.fields:
        collect_shared_children(schema, f)


def collect_shared_children(schema, f):
    if not f.children:
        return
    tr = f.tref.elem if f.tref.kind == "array" else f.tref
    if tr.kind != "struct":
        raise SchemaError(f.loc, "field '%s' of type %s cannot have children" % (f.name, f.tref))
    sd = StructDef(f.loc, tr.name, None, f.children, True)
    add_shared(schema, sd)
    tr.sdef = sd


def parse_errors(lines, schema):
    loc0, _, toks0 = lines[0]
    if len(toks0) != 1:
        raise SchemaError(loc0, "'errors' takes no attributes")
    for loc, indent, toks in lines[1:]:
        if len(toks) < 4:
            raise SchemaError(loc, 'expected CODE NAME CLASS "message" [provisional]')
        code = parse_int(toks[0].text, loc, "error code")
        if code < -32768 or code > 32767:
            raise SchemaError(loc, "error code %d out of int16 range" % code)
        name = toks[1].text
        if not UPPER_RE.match(name):
            raise SchemaError(loc, "bad error name '%s' (UPPER_SNAKE_CASE)" % name)
        klass = toks[2].text
        if klass not in ("retriable", "fatal", "none"):
            raise SchemaError(loc, "bad error class '%s' (retriable, fatal or none)" % klass)
        if toks[3].text != "" or toks[3].quoted is None:
            raise SchemaError(loc, "expected a quoted message after the class")
        prov = False
        for t in toks[4:]:
            if t.text == "provisional" and t.quoted is None and not prov:
                prov = True
            else:
                raise SchemaError(loc, "unexpected '%s'" % (t.text or t.quoted))
        if (code == 0) != (klass == "none"):
            raise SchemaError(loc, "class 'none' is for code 0 only, and code 0 must use it")
        for e in schema.errors:
            if e.code == code:
                raise SchemaError(loc, "error code %d already defined at %s" % (code, e.loc))
            if e.name == name:
                raise SchemaError(loc, "error name %s already defined at %s" % (name, e.loc))
        schema.errors.append(ErrorCode(loc, code, name, klass, toks[3].quoted, prov))


def parse_constants(lines, schema):
    loc0, _, toks0 = lines[0]
    if len(toks0) != 1:
        raise SchemaError(loc0, "'constants' takes no attributes")
    for loc, indent, toks in lines[1:]:
        if len(toks) < 2:
            raise SchemaError(loc, 'expected NAME VALUE [provisional] [doc "..."]')
        name = toks[0].text
        if not UPPER_RE.match(name):
            raise SchemaError(loc, "bad constant name '%s' (UPPER_SNAKE_CASE)" % name)
        if toks[1].quoted is not None:
            if toks[1].text:
                raise SchemaError(loc, "bad value")
            value = ("str", toks[1].quoted)
        else:
            value = parse_int(toks[1].text, loc, "constant value")
            if value < -(1 << 63) or value >= (1 << 64):
                raise SchemaError(loc, "constant %s out of 64-bit range" % name)
        prov = False
        doc = None
        i = 2
        while i < len(toks):
            t = toks[i]
            if t.text == "provisional" and t.quoted is None and not prov:
                prov = True
                i += 1
            elif t.text in ("doc", "doc=") and doc is None:
                doc, i = take_doc(toks, i, loc)
            else:
                raise SchemaError(loc, "unexpected '%s'" % (t.text or t.quoted))
        for c in schema.constants:
            if c.name == name:
                raise SchemaError(loc, "constant %s already defined at %s" % (name, c.loc))
        schema.constants.append(Constant(loc, name, value, prov, doc))


# ----------------------------------------------------------------------------------------------
# Resolution and validation


def parse_default(f):
    """Check f.default against the field type; set f.dflt to one of:
    ('int', n) ('bool', b) ('float', x) ('str', s) ('null',) ('empty',) ('zero',)."""
    tr = f.tref
    d = f.default
    loc = f.loc
    if d is None:
        if tr.kind == "prim":
            n = tr.name
            if n in INT_RANGES:
                f.dflt = ("int", 0)
            elif n == "bool":
                f.dflt = ("bool", False)
            elif n == "float64":
                f.dflt = ("float", 0.0)
            elif n == "string":
                f.dflt = ("str", "")
            elif n == "uuid":
                f.dflt = ("zero",)
            else:
                f.dflt = ("empty",)
        else:
            f.dflt = ("empty",)
        return
    if d == "null":
        if not tr.nullable_capable():
            raise SchemaError(loc, "default=null for field '%s' of type %s" % (f.name, tr))
        f.dflt = ("null",)
        return
    if tr.kind != "prim":
        raise SchemaError(
            loc, "bad default for %s field '%s' (only default=null)" % (tr, f.name)
        )
    n = tr.name
    if isinstance(d, tuple):
        if n != "string":
            raise SchemaError(loc, "quoted default for %s field '%s'" % (n, f.name))
        if len(d[1].encode("utf-8")) > 0x7FFF:
            raise SchemaError(loc, "default string too long")
        f.dflt = ("str", d[1])
        return
    if n in INT_RANGES:
        try:
            v = int(d, 0)
        except ValueError:
            raise SchemaError(loc, "bad default '%s' for %s field '%s'" % (d, n, f.name)) from None
        lo, hi = INT_RANGES[n]
        if v < lo or v > hi:
            raise SchemaError(loc, "default %s out of range for %s field '%s'" % (d, n, f.name))
        f.dflt = ("int", v)
    elif n == "bool":
        if d not in ("true", "false"):
            raise SchemaError(loc, "bad default '%s' for bool field '%s'" % (d, f.name))
        f.dflt = ("bool", d == "true")
    elif n == "float64":
        try:
            x = float(d)
        except ValueError:
            raise SchemaError(loc, "bad default '%s' for float64 field '%s'" % (d, f.name)) from None
        if x != x or x in (float("inf"), float("-inf")):
            raise SchemaError(loc, "default for float64 field '%s' must be finite" % f.name)
        f.dflt = ("float", x)
    elif n == "uuid":
        if d != "zero":
            raise SchemaError(loc, "bad default '%s' for uuid field '%s' (only zero)" % (d, f.name))
        f.dflt = ("zero",)
    elif n == "string":
        raise SchemaError(loc, 'string default must be quoted (default="%s") or null' % d)
    else:
        raise SchemaError(loc, "bad default '%s' for %s field '%s' (only null)" % (d, n, f.name))


class Resolver:
    def __init__(self, schema):
        self.schema = schema

    def run(self):
        s = self.schema
        # Unique API keys and message names.
        keys = {}
        names = {}
        for a in s.apis:
            if a.key in keys:
                raise SchemaError(a.loc, "api key %d already used by %s" % (a.key, keys[a.key].name))
            keys[a.key] = a
        rtypes = {}
        for r in s.records:
            if r.rtype in rtypes:
                raise SchemaError(
                    r.loc, "record type %d already used by %s" % (r.rtype, rtypes[r.rtype].name)
                )
            rtypes[r.rtype] = r
        for m in s.messages():
            other = names.get(m.name)
            if other is not None:
                raise SchemaError(m.loc, "message %s already defined at %s" % (m.name, other.loc))
            names[m.name] = m
        for sd in s.shared.values():
            if sd.name in names:
                raise SchemaError(
                    sd.loc, "shared struct '%s' has the name of a message" % sd.name
                )
        # Shared structs: fields, defaults, struct references.
        for sd in list(s.shared.values()):
            self.check_struct(sd, None, [])
        # Messages: define nested structs, resolve references.
        by_file = {}
        for m in s.messages():
            by_file.setdefault(m.file, []).append(m)
        for m in s.messages():
            self.define_nested(m, m.root.fields)
        for m in s.messages():
            scope = [m] + [o for o in by_file[m.file] if o is not m]
            self.check_struct(m.root, m, scope)
            for sd in m.structs.values():
                self.check_struct(sd, m, scope)
        # Walk every message: version ranges, tags, nullable versions.
        for m in s.messages():
            self.walk(m, m.root, m.versions, [])
        if len({h.name for h in s.headers}) != len(s.headers):
            raise SchemaError(None, "duplicate header names")

    def define_nested(self, m, fields):
        for f in fields:
            if not f.children:
                continue
            tr = f.tref.elem if f.tref.kind == "array" else f.tref
            if tr.kind != "struct":
                raise SchemaError(
                    f.children[0].loc,
                    "field '%s' of type %s cannot have children" % (f.name, f.tref),
                )
            if not NAME_RE.match(tr.name):
                raise SchemaError(f.loc, "bad struct name '%s' (CamelCase)" % tr.name)
            if tr.name in m.structs:
                raise SchemaError(
                    f.loc,
                    "struct '%s' defined twice in %s (first at %s)"
                    % (tr.name, m.name, m.structs[tr.name].loc),
                )
            if tr.name == m.name:
                raise SchemaError(f.loc, "struct '%s' has the name of its message" % tr.name)
            sd = StructDef(f.loc, tr.name, m, f.children, False)
            m.structs[tr.name] = sd
            tr.sdef = sd
            self.define_nested(m, f.children)

    def lookup(self, name, scope):
        for m in scope:
            if name in m.structs:
                return m.structs[name]
        return self.schema.shared.get(name)

    def check_struct(self, sd, m, scope):
        seen = {}
        tags = {}
        for f in sd.fields:
            if f.name in seen:
                raise SchemaError(
                    f.loc, "field '%s' already defined at %s" % (f.name, seen[f.name].loc)
                )
            seen[f.name] = f
            tr = f.tref.elem if f.tref.kind == "array" else f.tref
            if tr.kind == "struct" and tr.sdef is None:
                if f.children:
                    raise SchemaError(f.loc, "internal: unresolved inline struct")
                if not NAME_RE.match(tr.name):
                    raise SchemaError(f.loc, "unknown type '%s'" % tr.name)
                tr.sdef = self.lookup(tr.name, scope)
                if tr.sdef is None:
                    raise SchemaError(
                        f.loc,
                        "unknown type '%s' (a struct needs indented children or a definition "
                        "in a structs file)" % tr.name,
                    )
            if tr.kind == "prim" and f.children:
                raise SchemaError(
                    f.children[0].loc,
                    "field '%s' of type %s cannot have children" % (f.name, f.tref),
                )
            if (f.nullable_all or f.nullable) and not f.tref.nullable_capable():
                raise SchemaError(
                    f.loc,
                    "field '%s' of type %s cannot be nullable (only string, bytes, records, "
                    "arrays and structs)" % (f.name, f.tref),
                )
            if f.flexnone and not (f.tref.kind == "prim" and f.tref.name in ("string", "bytes", "records")):
                raise SchemaError(
                    f.loc, "flexible=none is only supported on string, bytes and records fields"
                )
            if f.tag is not None:
                if f.tag in tags:
                    raise SchemaError(
                        f.loc,
                        "tag %d already used by '%s' (%s)" % (f.tag, tags[f.tag].name, tags[f.tag].loc),
                    )
                tags[f.tag] = f
                if f.flexnone:
                    raise SchemaError(f.loc, "a tagged field cannot be flexible=none")
            parse_default(f)
            if f.versions is not None and f.nullable is not None:
                if f.versions.intersect(f.nullable) is None:
                    raise SchemaError(
                        f.loc,
                        "nullable=%s does not overlap the field versions %s" % (f.nullable, f.versions),
                    )

    def walk(self, m, sd, rng, path):
        """rng: the versions in which sd is reached in message m."""
        sd.used = True
        sd.vrange = rng.hull(sd.vrange) if sd.vrange else rng
        if m.flex is not None and (rng.hi is None or rng.hi >= m.flex):
            sd.flexible_any = True
        if sd in path:
            raise SchemaError(sd.loc, "struct '%s' contains itself" % sd.name)
        for f in sd.fields:
            fv = f.versions if f.versions is not None else Versions(m.versions.lo, None)
            if f.versions is not None and sd.is_root:
                mv = m.versions
                if fv.lo > mv.hi or (fv.hi is not None and (fv.hi > mv.hi or fv.hi < mv.lo)):
                    raise SchemaError(
                        f.loc,
                        "versions %s of field '%s' are outside the versions %s of %s"
                        % (fv, f.name, mv, m.name),
                    )
            elif f.versions is not None and not sd.shared:
                mv = m.versions
                if fv.lo > mv.hi or (fv.hi is not None and fv.hi > mv.hi):
                    raise SchemaError(
                        f.loc,
                        "versions %s of field '%s' are outside the versions %s of %s"
                        % (fv, f.name, mv, m.name),
                    )
            present = rng.intersect(fv)
            if present is None:
                if not sd.shared:
                    raise SchemaError(
                        f.loc,
                        "field '%s' (versions %s) is never present: its struct exists only in "
                        "versions %s" % (f.name, fv, rng),
                    )
                continue
            if f.tag is not None:
                if m.flex is None or present.lo < m.flex:
                    raise SchemaError(
                        f.loc,
                        "tagged field '%s' in non-flexible versions of %s (field %s, flexible %s)"
                        % (
                            f.name,
                            m.name,
                            present,
                            "none" if m.flex is None else "%d+" % m.flex,
                        ),
                    )
            if f.dflt == ("null",):
                nv = None
                if f.nullable_all:
                    nv = Versions(0, None)
                elif f.nullable is not None:
                    nv = f.nullable
                if nv is None or present.intersect(nv) is None or not present.within(nv):
                    raise SchemaError(
                        f.loc,
                        "default=null but field '%s' is not nullable in every version it has (%s)"
                        % (f.name, present),
                    )
            tr = f.tref.elem if f.tref.kind == "array" else f.tref
            if tr.kind == "struct":
                self.walk(m, tr.sdef, present, path + [sd])


def kps_files(d):
    """The *.kps files under directory d and its subdirectories, in a stable order."""
    out = []
    for root, dirs, files in os.walk(d):
        dirs.sort()
        for n in sorted(files):
            if n.endswith(".kps"):
                out.append(os.path.join(root, n))
    return sorted(out, key=lambda p: os.path.relpath(p, d).split(os.sep))


def load(schema_dirs):
    """Parse and check every *.kps file in the given directories (with their subdirectories)
    or files."""
    schema = Schema()
    paths = []
    for d in schema_dirs:
        if os.path.isdir(d):
            paths.extend(kps_files(d))
        else:
            paths.append(d)
    for p in paths:
        parse_file(p, schema)
        schema.files.append(p)
    Resolver(schema).run()
    # Stable order: APIs by key, headers by name.
    schema.apis.sort(key=lambda a: a.key)
    schema.headers.sort(key=lambda h: h.name)
    schema.records.sort(key=lambda r: r.rtype)
    schema.datas.sort(key=lambda d: d.name)
    schema.errors.sort(key=lambda e: e.code)
    return schema
