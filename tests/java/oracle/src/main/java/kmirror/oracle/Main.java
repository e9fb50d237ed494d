package kmirror.oracle;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.kafka.common.message.ApiMessageType;
import org.apache.kafka.common.metadata.MetadataRecordType;
import org.apache.kafka.common.message.RequestHeaderData;
import org.apache.kafka.common.message.ResponseHeaderData;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.types.Schema;
import org.apache.kafka.common.protocol.types.Struct;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.server.common.ApiMessageAndVersion;

import kmirror.oracle.Model.Kind;
import kmirror.oracle.Model.TypeM;
import kmirror.oracle.Specs.Spec;

/**
 * kmirror codec oracle (Apache Kafka's kafka-clients as the reference encoder/decoder).
 *
 * <pre>
 * gen OUT       [--schema-dir DIR | --all] [--count K] [--seed S] [--no-json] [--strict]
 * verify FILE   decode our dump (api kind version hex json) with Kafka, compare every field
 * selfcheck     [--schema-dir DIR | --all] [--count K] [--seed S] [--out FILE]
 * list          [--schema-dir DIR | --all]   coverage table
 * layout KEY KIND VERSION                    print the oracle's field layout of one message
 * </pre>
 *
 * The claimed set is read from the header lines of DIR/**.kps ("api NAME key=N versions=A-B",
 * "header RequestHeader|ResponseHeader versions=A-B", "record NAME type=N versions=A-B"). Without
 * a schema dir (or with --all) the oracle covers everything it knows: every API and version of
 * the library plus the KIP-1279 additions, and every KRaft metadata record type and version.
 * Vector lines: {@code <api_key> <kind> <version> <hex> [<json>]} (docs/codec.md); for kind
 * {@code record} the key is the record type and the hex is the whole framed record value (frame
 * version, type, version, record), written and read by Kafka's MetadataRecordSerde. A
 * standalone message ("data NAME versions=A-B", e.g. DefaultPrincipalData) has key -1 and its
 * name as the kind.
 */
public final class Main {
  private Main() {}

  static final PrintStream OUT = System.out;
  static final PrintStream ERR = System.err;

  public static void main(String[] argv) throws Exception {
    if (argv.length < 1) usage();
    List<String> rest = new ArrayList<>(Arrays.asList(argv).subList(1, argv.length));
    int rc;
    switch (argv[0]) {
      case "gen": rc = gen(rest); break;
      case "verify": rc = verify(rest); break;
      case "selfcheck": rc = selfcheck(rest); break;
      case "list": rc = list(rest); break;
      case "layout": rc = layout(rest); break;
      default: usage(); rc = 64;
    }
    OUT.flush();
    System.exit(rc);
  }

  static void usage() {
    ERR.println("usage: oracle gen OUT [--schema-dir DIR|--all] [--count K] [--seed S] [--no-json] [--strict]");
    ERR.println("       oracle verify FILE");
    ERR.println("       oracle selfcheck [--schema-dir DIR|--all] [--count K] [--seed S] [--out FILE]");
    ERR.println("       oracle list [--schema-dir DIR|--all]");
    System.exit(64);
  }

  static String opt(List<String> a, String name, String dflt) {
    int i = a.indexOf(name);
    if (i < 0) return dflt;
    if (i + 1 >= a.size()) usage();
    String v = a.get(i + 1);
    a.remove(i + 1);
    a.remove(i);
    return v;
  }

  static boolean flag(List<String> a, String name) { return a.remove(name); }

  // ------------------------------------------------------------------------------ claimed set

  /** One (key, kind) and its version range. */
  static final class Claim implements Comparable<Claim> {
    final short key;
    final String kind;
    final short lo, hi;
    final String name;

    Claim(short key, String kind, short lo, short hi, String name) {
      this.key = key;
      this.kind = kind;
      this.lo = lo;
      this.hi = hi;
      this.name = name;
    }

    @Override public int compareTo(Claim o) {
      if (key != o.key) return Short.compare(key, o.key);
      int c = Integer.compare(kindOrder(kind), kindOrder(o.kind));
      return c != 0 ? c : kind.compareTo(o.kind);
    }
  }

  /** Fixed kinds first; a standalone message's kind is its name and sorts after them. */
  static int kindOrder(String k) {
    int i = List.of("reqheader", "respheader", "request", "response", "record").indexOf(k);
    return i >= 0 ? i : 5;
  }

  private static final Pattern API = Pattern.compile("^api\\s+(\\S+)\\s+.*?\\bkey=(-?\\d+)\\s+.*?\\bversions=(\\d+)(?:-(\\d+))?");
  private static final Pattern HDR = Pattern.compile("^header\\s+(RequestHeader|ResponseHeader)\\s+.*?\\bversions=(\\d+)(?:-(\\d+))?");
  private static final Pattern DATA = Pattern.compile("^data\\s+(\\S+)\\s+.*?\\bversions=(\\d+)(?:-(\\d+))?");
  private static final Pattern REC = Pattern.compile("^record\\s+(\\S+)\\s+.*?\\btype=(\\d+)\\s+.*?\\bversions=(\\d+)(?:-(\\d+))?");

  /** Claims from the .kps header lines, or null when there is no usable schema dir. */
  static List<Claim> claimsFromSchemas(Path dir) throws IOException {
    if (dir == null || !Files.isDirectory(dir)) return null;
    List<Claim> out = new ArrayList<>();
    List<Path> files;
    try (java.util.stream.Stream<Path> st = Files.walk(dir)) {
      files = st.filter(p -> p.getFileName().toString().endsWith(".kps")).sorted().toList();
    }
    for (Path p : files) {
      for (String line : Files.readAllLines(p, StandardCharsets.UTF_8)) {
        Matcher m = REC.matcher(line);
        if (m.find()) {
          short type = Short.parseShort(m.group(2));
          short lo = Short.parseShort(m.group(3));
          short hi = m.group(4) == null ? lo : Short.parseShort(m.group(4));
          out.add(new Claim(type, "record", lo, hi, m.group(1)));
          continue;
        }
        m = DATA.matcher(line);
        if (m.find()) {
          short lo = Short.parseShort(m.group(2));
          short hi = m.group(3) == null ? lo : Short.parseShort(m.group(3));
          out.add(new Claim((short) -1, m.group(1), lo, hi, m.group(1)));
          continue;
        }
        m = API.matcher(line);
        if (m.find()) {
          short key = Short.parseShort(m.group(2));
          short lo = Short.parseShort(m.group(3));
          short hi = m.group(4) == null ? lo : Short.parseShort(m.group(4));
          out.add(new Claim(key, "request", lo, hi, m.group(1)));
          out.add(new Claim(key, "response", lo, hi, m.group(1)));
          continue;
        }
        m = HDR.matcher(line);
        if (m.find()) {
          short lo = Short.parseShort(m.group(2));
          short hi = m.group(3) == null ? lo : Short.parseShort(m.group(3));
          out.add(new Claim((short) -1, m.group(1).equals("RequestHeader") ? "reqheader" : "respheader", lo, hi,
              m.group(1)));
        }
      }
    }
    if (out.isEmpty()) return null;
    out.sort(null);
    return out;
  }

  /** Everything the oracle knows. */
  static List<Claim> allClaims() {
    List<Claim> out = new ArrayList<>();
    out.add(new Claim((short) -1, "reqheader", firstNonNull(RequestHeaderData.SCHEMAS),
        (short) (RequestHeaderData.SCHEMAS.length - 1), "RequestHeader"));
    out.add(new Claim((short) -1, "respheader", firstNonNull(ResponseHeaderData.SCHEMAS),
        (short) (ResponseHeaderData.SCHEMAS.length - 1), "ResponseHeader"));
    for (ApiMessageType t : ApiMessageType.values()) {
      short lo = firstNonNull(t.requestSchemas());
      short hi = (short) (t.requestSchemas().length - 1);
      if (t.apiKey() == 1 || t.apiKey() == 19) hi++; // Fetch v19, CreateTopics v8 (KIP-1279)
      out.add(new Claim(t.apiKey(), "request", lo, hi, t.name()));
      out.add(new Claim(t.apiKey(), "response", lo, hi, t.name()));
    }
    for (MetadataRecordType t : MetadataRecordType.values()) {
      out.add(new Claim(t.id(), "record", t.lowestSupportedVersion(), t.highestSupportedVersion(),
          t.newMetadataRecord().getClass().getSimpleName()));
    }
    for (String n : Specs.DATA) {
      Schema[] sc = Specs.dataSchemas(n);
      out.add(new Claim((short) -1, n, firstNonNull(sc), (short) (sc.length - 1), n));
    }
    for (int k : Specs.Mirror.KEYS) {
      String n = Specs.Mirror.spec((short) k, true).name.replace("Request", "");
      out.add(new Claim((short) k, "request", (short) 0, (short) 0, n));
      out.add(new Claim((short) k, "response", (short) 0, (short) 0, n));
    }
    out.sort(null);
    return out;
  }

  static short firstNonNull(Schema[] s) {
    for (short v = 0; v < s.length; v++) if (s[v] != null) return v;
    return 0;
  }

  static List<Claim> claims(List<String> a) throws IOException {
    boolean all = flag(a, "--all");
    String dir = opt(a, "--schema-dir", null);
    if (all) return allClaims();
    List<Claim> c = claimsFromSchemas(dir == null ? null : Paths.get(dir));
    if (c == null) {
      ERR.println("oracle: WARNING: no .kps api/header lines under " + dir
          + "; covering everything the oracle knows instead (--all)");
      return allClaims();
    }
    return c;
  }

  // ------------------------------------------------------------------------ encode / decode

  static final class Vector {
    final Spec spec;
    final byte[] bytes;
    final Map<String, Object> tree;
    final String json;

    Vector(Spec spec, byte[] bytes, Map<String, Object> tree, String json) {
      this.spec = spec;
      this.bytes = bytes;
      this.tree = tree;
      this.json = json;
    }

    /** An empty body is written as "-" so that the line keeps its columns. */
    String line(boolean withJson) {
      return spec.apiKey + " " + spec.kind + " " + spec.version + " "
          + (bytes.length == 0 ? "-" : Model.toHex(bytes)) + (withJson ? " " + json : "");
    }
  }

  static byte[] schemaWrite(Schema schema, Struct st) {
    ByteBuffer b = ByteBuffer.allocate(schema.sizeOf(st));
    schema.write(b, st);
    if (b.hasRemaining()) throw new IllegalStateException("Schema.sizeOf and write disagree");
    return b.array();
  }

  static byte[] messageWrite(Message m, short v) {
    ObjectSerializationCache cache = new ObjectSerializationCache();
    int size = m.size(cache, v);
    ByteBuffer b = ByteBuffer.allocate(size);
    m.write(new ByteBufferAccessor(b), cache, v);
    if (b.hasRemaining()) throw new IllegalStateException("Message.size and write disagree");
    return b.array();
  }

  static TypeM structType(Spec s) { return new TypeM(Kind.STRUCT, false, false, null, s.model); }

  /**
   * Encodes a tree. Library-backed layouts go through both of the library's encoders: the generic
   * Schema/Struct one, then the generated *Data class (read + write); the two must agree and
   * the Data class must give back every value. The bytes returned are the *Data class's.
   */
  static byte[] encode(Spec s, Map<String, Object> tree) {
    byte[] viaSchema = schemaWrite(s.schema, Model.toStruct(tree, s.model, s.schema));
    if (s.data == null) return s.kind.equals("record") ? frame(s, viaSchema) : viaSchema;
    Message m = s.data.get();
    ByteBuffer in = ByteBuffer.wrap(viaSchema);
    m.read(new ByteBufferAccessor(in), s.dataVersion);
    if (in.hasRemaining()) throw new IllegalStateException(s.id() + ": Data class left " + in.remaining() + " bytes");
    Object back = Model.javaToTree(m, structType(s));
    if (!back.equals(tree)) throw new IllegalStateException(s.id() + ": Data class did not read back every value");
    byte[] viaData = messageWrite(m, s.dataVersion);
    if (!Arrays.equals(viaData, viaSchema)) {
      throw new IllegalStateException(s.id() + ": Schema and Data class encodings differ at byte "
          + firstDiff(viaData, viaSchema));
    }
    if (s.kind.equals("record")) {
      byte[] framed = serdeWrite((ApiMessage) m, s.dataVersion);
      if (!Arrays.equals(framed, frame(s, viaData))) {
        throw new IllegalStateException(s.id() + ": MetadataRecordSerde frames the record differently");
      }
      return framed;
    }
    return viaData;
  }

  /** A metadata record value as Kafka's MetadataRecordSerde writes it. */
  static byte[] serdeWrite(ApiMessage m, short v) {
    ObjectSerializationCache cache = new ObjectSerializationCache();
    ApiMessageAndVersion mv = new ApiMessageAndVersion(m, v);
    int size = MetadataRecordSerde.INSTANCE.recordSize(mv, cache);
    ByteBuffer b = ByteBuffer.allocate(size);
    MetadataRecordSerde.INSTANCE.write(mv, cache, new ByteBufferAccessor(b));
    if (b.hasRemaining()) throw new IllegalStateException("MetadataRecordSerde size and write disagree");
    return b.array();
  }

  /** Frame version 1, record type, record version (unsigned varints), then the record. */
  static byte[] frame(Spec s, byte[] body) {
    java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream();
    for (int x : new int[] {1, s.apiKey, s.version}) {
      while ((x & ~0x7f) != 0) {
        b.write((x & 0x7f) | 0x80);
        x >>>= 7;
      }
      b.write(x);
    }
    b.writeBytes(body);
    return b.toByteArray();
  }

  /** An unsigned varint (at most 5 bytes); -1 when malformed. */
  static int uvarint(ByteBuffer in) {
    int v = 0;
    for (int shift = 0; shift < 35 && in.hasRemaining(); shift += 7) {
      int b = in.get() & 0xff;
      v |= (b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    return -1;
  }

  static int firstDiff(byte[] a, byte[] b) {
    int n = Math.min(a.length, b.length);
    for (int i = 0; i < n; i++) if (a[i] != b[i]) return i;
    return n;
  }

  /** Decodes with the library; appends problems; returns the tree or null. */
  @SuppressWarnings("unchecked")
  static Map<String, Object> decode(Spec s, byte[] bytes, List<String> problems) {
    ByteBuffer in = ByteBuffer.wrap(bytes);
    Map<String, Object> tree;
    byte[] again;
    try {
      if (s.kind.equals("record") && s.data == null) {
        // a record Kafka has no class for (kbroker's own): the frame by hand, then the schema
        int[] hdr = new int[3];
        for (int k = 0; k < 3; k++) hdr[k] = uvarint(in);
        if (hdr[0] != 1 || hdr[1] != s.apiKey || hdr[2] != s.version) {
          problems.add("frame " + hdr[0] + " type " + hdr[1] + " version " + hdr[2]);
          return null;
        }
        Struct st = s.schema.read(in);
        tree = Model.fromStruct(st, s.model);
        again = frame(s, schemaWrite(s.schema, Model.toStruct(tree, s.model, s.schema)));
      } else if (s.kind.equals("record")) {
        ApiMessageAndVersion mv = MetadataRecordSerde.INSTANCE.read(new ByteBufferAccessor(in), bytes.length);
        if (mv.message().apiKey() != s.apiKey || mv.version() != s.version) {
          problems.add("Kafka reads record type " + mv.message().apiKey() + " version " + mv.version());
          return null;
        }
        tree = (Map<String, Object>) Model.javaToTree(mv.message(), structType(s));
        again = serdeWrite(mv.message(), mv.version());
      } else if (s.data != null) {
        Message m = s.data.get();
        m.read(new ByteBufferAccessor(in), s.dataVersion);
        tree = (Map<String, Object>) Model.javaToTree(m, structType(s));
        again = messageWrite(m, s.dataVersion);
      } else {
        Struct st = s.schema.read(in);
        tree = Model.fromStruct(st, s.model);
        again = schemaWrite(s.schema, Model.toStruct(tree, s.model, s.schema));
      }
    } catch (RuntimeException e) {
      problems.add("Kafka cannot decode it: " + e.getClass().getSimpleName() + ": " + e.getMessage());
      return null;
    }
    if (in.hasRemaining()) {
      problems.add(in.remaining() + " of " + bytes.length + " bytes left over after Kafka decoded the message");
    }
    if (!Arrays.equals(again, bytes)) {
      problems.add("Kafka re-encodes the decoded message differently (" + again.length + " vs " + bytes.length
          + " bytes, first difference at byte " + firstDiff(again, bytes) + ")");
    }
    return tree;
  }

  static long mix(long seed, Spec s, int i) {
    long h = seed * 0x9E3779B97F4A7C15L;
    h ^= (s.apiKey + 7L) * 0xBF58476D1CE4E5B9L;
    h ^= (kindOrder(s.kind) + 1L + (kindOrder(s.kind) == 5 ? s.kind.hashCode() : 0)) * 0x94D049BB133111EBL;
    h ^= (s.version + 1L) * 0xD6E8FEB86659FD93L;
    return h + i;
  }

  /** Generates K vectors per covered (key, kind, version); uncovered ones go to {@code missing}. */
  static List<Vector> generate(List<Claim> claims, int k, long seed, List<String> missing,
                               Map<String, Integer> perSource) {
    List<Vector> out = new ArrayList<>();
    for (Claim c : claims) {
      for (short v = c.lo; v <= c.hi; v++) {
        Spec s = Specs.lookup(c.key, c.kind, v);
        if (s == null) {
          missing.add(c.key + " " + c.kind + " v" + v + " (" + c.name + ")");
          continue;
        }
        perSource.merge(s.source.startsWith("alias") ? "alias" : s.source, 1, Integer::sum);
        for (int i = 0; i < k; i++) {
          SplittableRandom r = new SplittableRandom(mix(seed, s, i));
          Map<String, Object> tree = Tree.fill(s.model, r);
          byte[] bytes = encode(s, tree);
          out.add(new Vector(s, bytes, tree, Tree.json(tree, s.model)));
        }
      }
    }
    return out;
  }

  // ------------------------------------------------------------------------------------ gen

  static int gen(List<String> a) throws IOException {
    int k = Integer.parseInt(opt(a, "--count", "3"));
    long seed = Long.parseLong(opt(a, "--seed", "1"));
    boolean json = !flag(a, "--no-json");
    boolean strict = flag(a, "--strict");
    List<Claim> claims = claims(a);
    if (a.size() != 1) usage();
    List<String> missing = new ArrayList<>();
    Map<String, Integer> perSource = new TreeMap<>();
    List<Vector> vs = generate(claims, k, seed, missing, perSource);
    try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(Paths.get(a.get(0)), StandardCharsets.UTF_8))) {
      for (Vector v : vs) w.println(v.line(json));
    }
    report(vs, missing, perSource);
    return strict && !missing.isEmpty() ? 1 : 0;
  }

  static void report(List<Vector> vs, List<String> missing, Map<String, Integer> perSource) {
    Set<String> classes = new TreeSet<>();
    Set<String> versions = new TreeSet<>();
    for (Vector v : vs) {
      classes.add(v.spec.apiKey + " " + v.spec.kind);
      versions.add(v.spec.apiKey + " " + v.spec.kind + " " + v.spec.version);
    }
    ERR.println("oracle: " + vs.size() + " vectors, " + classes.size() + " message classes, " + versions.size()
        + " (class, version) pairs; by source " + perSource);
    for (String m : missing) ERR.println("oracle: UNCOVERED (no Kafka layout): " + m);
  }

  // --------------------------------------------------------------------------------- verify

  static int verify(List<String> a) throws IOException {
    if (a.size() != 1) usage();
    Path file = Paths.get(a.get(0));
    int passed = 0, failed = 0, skipped = 0, lineNo = 0;
    Map<String, Spec> cache = new TreeMap<>();
    try (BufferedReader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
      String line;
      while ((line = r.readLine()) != null) {
        lineNo++;
        String t = line.strip();
        if (t.isEmpty() || t.startsWith("#")) continue;
        String[] p = t.split("\\s+", 5);
        // An empty body may be written as "-", or as nothing (then the JSON lands in column 4).
        if (p.length == 4 && (p[3].startsWith("{") || p[3].startsWith("["))) {
          p = new String[] {p[0], p[1], p[2], "", p[3]};
        } else if (p.length == 5 && (p[3].startsWith("{"))) {
          p = new String[] {p[0], p[1], p[2], "", p[3] + " " + p[4]};
        }
        if (p.length >= 4 && p[3].equals("-")) p[3] = "";
        String where = file.getFileName() + ":" + lineNo;
        if (p.length < 4) {
          OUT.println("FAIL " + where + ": malformed line (want: api_key kind version hex json)");
          failed++;
          continue;
        }
        short key, ver;
        try {
          key = Short.parseShort(p[0]);
          ver = Short.parseShort(p[2]);
        } catch (NumberFormatException e) {
          OUT.println("FAIL " + where + ": malformed api_key or version");
          failed++;
          continue;
        }
        String kind = p[1];
        String id = key + " " + kind + " " + ver;
        Spec s = cache.computeIfAbsent(id, x -> Specs.lookup(key, kind, ver));
        if (s == null) {
          OUT.println("SKIP " + where + ": the oracle has no layout for " + id);
          skipped++;
          continue;
        }
        List<String> problems = new ArrayList<>();
        byte[] bytes;
        try {
          bytes = Model.fromHex(p[3]);
        } catch (IllegalArgumentException e) {
          OUT.println("FAIL " + where + " " + s.id() + ": " + e.getMessage());
          failed++;
          continue;
        }
        Map<String, Object> tree = decode(s, bytes, problems);
        if (p.length < 5) {
          problems.add("no JSON column");
        } else if (tree != null) {
          try {
            Tree.compareStruct("", tree, Json.parse(p[4]), s.model, problems);
          } catch (IllegalArgumentException e) {
            problems.add("unreadable JSON: " + e.getMessage());
          }
        }
        if (problems.isEmpty()) {
          passed++;
        } else {
          failed++;
          int shown = 0;
          for (String pr : problems) {
            if (shown++ == 20) {
              OUT.println("FAIL " + where + " " + s.id() + ": ... " + (problems.size() - 20) + " more");
              break;
            }
            OUT.println("FAIL " + where + " " + s.id() + ": " + pr);
          }
        }
      }
    }
    OUT.println(passed + " passed, " + failed + " failed" + (skipped > 0 ? ", " + skipped + " skipped" : ""));
    return failed > 0 ? 1 : 0;
  }

  // ------------------------------------------------------------------------------ selfcheck

  /**
   * Generates vectors in memory and checks the oracle against itself: each vector decodes with
   * the library to the values it was built from, consumes every byte, re-encodes to the same
   * bytes, matches its own JSON column, and has every field at a non-default value. For library
   * layouts it also checks that the oracle's own Schema builder (used for the KIP-1279 layouts)
   * reproduces the library's bytes.
   */
  static int selfcheck(List<String> a) throws IOException {
    int k = Integer.parseInt(opt(a, "--count", "3"));
    long seed = Long.parseLong(opt(a, "--seed", "1"));
    String outFile = opt(a, "--out", null);
    List<Claim> claims = claims(a);
    List<String> missing = new ArrayList<>();
    Map<String, Integer> perSource = new TreeMap<>();
    List<Vector> vs;
    try {
      vs = generate(claims, k, seed, missing, perSource);
    } catch (RuntimeException e) {
      OUT.println("FAIL generation: " + e);
      OUT.println("0 passed, 1 failed");
      return 1;
    }
    int passed = 0, failed = 0;
    for (Vector v : vs) {
      List<String> problems = new ArrayList<>();
      Map<String, Object> back = decode(v.spec, v.bytes, problems);
      if (back != null && !back.equals(v.tree)) problems.add("decoded values differ from the generated ones");
      if (back != null) Tree.compareStruct("", back, Json.parse(v.json), v.spec.model, problems);
      List<String> dflt = new ArrayList<>();
      Tree.defaults(v.tree, v.spec.model, "", dflt);
      for (String d : dflt) problems.add("field at its default value: " + d);
      if (v.spec.data != null) {
        Schema own = Model.toSchema(v.spec.model);
        byte[] b2 = schemaWrite(own, Model.toStruct(v.tree, v.spec.model, own));
        if (v.spec.kind.equals("record")) b2 = frame(v.spec, b2);
        if (!Arrays.equals(b2, v.bytes)) {
          problems.add("oracle-built Schema encodes differently from the library (byte " + firstDiff(b2, v.bytes) + ")");
        }
      }
      if (problems.isEmpty()) passed++;
      else {
        failed++;
        for (String p : problems) OUT.println("FAIL " + v.spec.id() + ": " + p);
      }
    }
    if (outFile != null) {
      try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(Paths.get(outFile), StandardCharsets.UTF_8))) {
        for (Vector v : vs) w.println(v.line(true));
      }
    }
    report(vs, missing, perSource);
    OUT.println(passed + " passed, " + failed + " failed");
    return failed > 0 ? 1 : 0;
  }

  // --------------------------------------------------------------------------------- layout

  static int layout(List<String> a) {
    if (a.size() != 3) usage();
    Spec s = Specs.lookup(Short.parseShort(a.get(0)), a.get(1), Short.parseShort(a.get(2)));
    if (s == null) {
      ERR.println("oracle: no layout for " + a);
      return 1;
    }
    OUT.println(s.id());
    printStruct(s.model, "  ");
    return 0;
  }

  static void printStruct(Model.StructM st, String ind) {
    for (Model.FieldM f : st.fields) {
      OUT.printf("%s%-28s %-22s%s default=%s%n", ind, f.name, f.type, f.tag == null ? "" : " tag=" + f.tag,
          f.dflt instanceof Map || f.dflt instanceof List ? (f.dflt instanceof List ? "[]" : "{..}") : Tree.brief(f.dflt));
      TypeM t = f.type.kind == Kind.ARRAY ? f.type.elem : f.type;
      if (t.kind == Kind.STRUCT) printStruct(t.struct, ind + "  ");
    }
  }

  // ----------------------------------------------------------------------------------- list

  static int list(List<String> a) throws IOException {
    List<Claim> claims = claims(a);
    for (Claim c : claims) {
      StringBuilder sb = new StringBuilder();
      for (short v = c.lo; v <= c.hi; v++) {
        Spec s = Specs.lookup(c.key, c.kind, v);
        sb.append(' ').append(v).append(':').append(s == null ? "NONE" : s.source.replace(" ", "-"));
      }
      OUT.printf("%4d %-10s %-28s%s%n", c.key, c.kind, c.name, sb);
    }
    return 0;
  }
}
