package kmirror.oracle;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.SplittableRandom;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.SimpleRecord;

import kmirror.oracle.Model.FieldM;
import kmirror.oracle.Model.Hex;
import kmirror.oracle.Model.Kind;
import kmirror.oracle.Model.StructM;
import kmirror.oracle.Model.TypeM;

/** Random filling, JSON printing and JSON comparison of value trees (see {@link Model}). */
final class Tree {
  private Tree() {}

  // ---------------------------------------------------------------------------------- filling

  /** Characters strings are drawn from: mostly ASCII, plus some that need care in JSON/UTF-8. */
  private static final String PLAIN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._";
  private static final String[] SPECIAL = {"\"", "\\", "\u0001", "\u00e9", "\u20ac", "\ud83d\ude00", "/", "\t"};

  /** Every field non-default, every array non-empty, every nullable value non-null. */
  static Map<String, Object> fill(StructM s, SplittableRandom r) {
    Map<String, Object> m = new LinkedHashMap<>();
    for (FieldM f : s.fields) m.put(f.name, fillValue(f.type, f.dflt, r));
    return m;
  }

  static Object fillValue(TypeM t, Object dflt, SplittableRandom r) {
    for (int attempt = 0; attempt < 100; attempt++) {
      Object v = fillOnce(t, dflt, r);
      if (!Objects.equals(v, dflt)) return v;
    }
    throw new IllegalStateException("could not find a non-default value for " + t);
  }

  private static Object fillOnce(TypeM t, Object dflt, SplittableRandom r) {
    switch (t.kind) {
      case BOOL: return dflt == null ? Boolean.TRUE : !(Boolean) dflt;
      case INT8: return (byte) r.nextInt(-128, 128);
      case INT16: return (short) r.nextInt(-32768, 32768);
      case UINT16: return r.nextInt(0, 65536);
      case INT32: return pickInt(r);
      case UINT32: return r.nextLong(0, 1L << 32);
      case INT64: return pickLong(r);
      case FLOAT64: return r.nextInt(-1_000_000, 1_000_000) / 64.0 + 0.25;
      case UUID: {
        Uuid u;
        do {
          u = new Uuid(r.nextLong(), r.nextLong());
        } while (u.equals(Uuid.ZERO_UUID) || u.equals(Uuid.ONE_UUID));
        return u;
      }
      case STRING: return randomString(r);
      case BYTES: {
        byte[] b = new byte[r.nextInt(1, 9)];
        r.nextBytes(b);
        return new Hex(b);
      }
      case RECORDS: return new Hex(recordBatch(r));
      case ARRAY: {
        List<Object> l = new ArrayList<>();
        int n = r.nextInt(1, 3);
        for (int i = 0; i < n; i++) {
          l.add(t.elem.kind == Kind.STRUCT ? fill(t.elem.struct, r) : fillOnce(t.elem, null, r));
        }
        return l;
      }
      case STRUCT: return fill(t.struct, r);
      default: throw new IllegalStateException();
    }
  }

  /** Mix of small, negative and large values so varint-free fixed widths are exercised fully. */
  private static int pickInt(SplittableRandom r) {
    switch (r.nextInt(4)) {
      case 0: return r.nextInt(1, 100);
      case 1: return r.nextInt(Integer.MIN_VALUE, -1);
      default: return r.nextInt();
    }
  }

  private static long pickLong(SplittableRandom r) {
    switch (r.nextInt(4)) {
      case 0: return r.nextLong(1, 1000);
      case 1: return r.nextLong(Long.MIN_VALUE, -1);
      default: return r.nextLong();
    }
  }

  private static String randomString(SplittableRandom r) {
    StringBuilder sb = new StringBuilder();
    int n = r.nextInt(1, 12);
    for (int i = 0; i < n; i++) sb.append(PLAIN.charAt(r.nextInt(PLAIN.length())));
    if (r.nextInt(3) == 0) sb.insert(r.nextInt(sb.length() + 1), SPECIAL[r.nextInt(SPECIAL.length)]);
    return sb.toString();
  }

  /** A valid record batch (magic 2, uncompressed) with one or two records. */
  private static byte[] recordBatch(SplittableRandom r) {
    int n = r.nextInt(1, 3);
    SimpleRecord[] recs = new SimpleRecord[n];
    for (int i = 0; i < n; i++) {
      recs[i] = new SimpleRecord(1_700_000_000_000L + r.nextInt(1_000_000),
          ("k" + r.nextInt(1000)).getBytes(StandardCharsets.UTF_8),
          ("v" + r.nextInt(1_000_000)).getBytes(StandardCharsets.UTF_8));
    }
    MemoryRecords mr = MemoryRecords.withRecords(r.nextLong(0, 1L << 40), Compression.NONE, recs);
    return Model.bufBytes(mr.buffer());
  }

  // ------------------------------------------------------------------------ non-default check

  /** Appends the paths of fields (at any depth) whose value equals their default. */
  static void defaults(Map<String, Object> v, StructM s, String path, List<String> out) {
    for (FieldM f : s.fields) {
      Object x = v.get(f.name);
      String p = path.isEmpty() ? f.name : path + "." + f.name;
      if (Objects.equals(x, f.dflt)) out.add(p);
      if (x instanceof List && f.type.kind == Kind.ARRAY && f.type.elem.kind == Kind.STRUCT) {
        List<?> l = (List<?>) x;
        for (int i = 0; i < l.size(); i++) defaults(cast(l.get(i)), f.type.elem.struct, p + "[" + i + "]", out);
      } else if (x instanceof Map) {
        defaults(cast(x), f.type.struct, p, out);
      }
    }
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> cast(Object o) { return (Map<String, Object>) o; }

  // ------------------------------------------------------------------------------ JSON output

  static String json(Map<String, Object> v, StructM s) {
    StringBuilder sb = new StringBuilder();
    writeStruct(sb, v, s);
    return sb.toString();
  }

  private static void writeStruct(StringBuilder sb, Map<String, Object> v, StructM s) {
    sb.append('{');
    boolean first = true;
    for (FieldM f : s.fields) {
      if (!first) sb.append(',');
      first = false;
      writeString(sb, f.name);
      sb.append(':');
      writeValue(sb, v.get(f.name), f.type);
    }
    sb.append('}');
  }

  private static void writeValue(StringBuilder sb, Object x, TypeM t) {
    if (x == null) {
      sb.append("null");
      return;
    }
    switch (t.kind) {
      case BOOL: case INT8: case INT16: case UINT16: case INT32: case UINT32: case INT64:
        sb.append(x);
        break;
      case FLOAT64: sb.append(new BigDecimal((Double) x).toPlainString()); break;
      case UUID: writeString(sb, Model.uuidHex((Uuid) x)); break;
      case STRING: writeString(sb, (String) x); break;
      case BYTES: case RECORDS: writeString(sb, ((Hex) x).hex); break;
      case ARRAY: {
        sb.append('[');
        List<?> l = (List<?>) x;
        for (int i = 0; i < l.size(); i++) {
          if (i > 0) sb.append(',');
          writeValue(sb, l.get(i), t.elem);
        }
        sb.append(']');
        break;
      }
      case STRUCT: writeStruct(sb, cast(x), t.struct); break;
      default: throw new IllegalStateException();
    }
  }

  static void writeString(StringBuilder sb, String s) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' || c == '\\') sb.append('\\').append(c);
      else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
      else sb.append(c);
    }
    sb.append('"');
  }

  // -------------------------------------------------------------------------- JSON comparison

  /**
   * Compares the value Kafka decoded ({@code k}) with the JSON that our codec printed
   * ({@code j}: the parsed JSON tree). Field names match after lowercasing and dropping
   * underscores. Appends one line per mismatch.
   */
  static void compareStruct(String path, Map<String, Object> k, Object j, StructM s, List<String> out) {
    if (!(j instanceof Map)) {
      out.add(path + ": expected a JSON object, got " + Json.brief(j));
      return;
    }
    Map<String, Object> jm = cast(j);
    Map<String, String> byNorm = new HashMap<>();
    for (String key : jm.keySet()) byNorm.put(Model.norm(key), key);
    for (FieldM f : s.fields) {
      String p = path.isEmpty() ? f.name : path + "." + f.name;
      String jk = byNorm.remove(Model.norm(f.name));
      if (jk == null) {
        out.add(p + ": missing from the JSON (Kafka decoded " + brief(k.get(f.name)) + ")");
        continue;
      }
      compareValue(p, k.get(f.name), jm.get(jk), f.type, out);
    }
    for (String extra : byNorm.values()) {
      out.add((path.isEmpty() ? "" : path + ".") + extra + ": in the JSON but not a field of this version");
    }
  }

  static void compareValue(String p, Object k, Object j, TypeM t, List<String> out) {
    if (k == null || j == null) {
      if (k != j) out.add(p + ": json=" + Json.brief(j) + " kafka=" + brief(k));
      return;
    }
    boolean ok;
    switch (t.kind) {
      case BOOL: ok = k.equals(j); break;
      case INT8: case INT16: case UINT16: case INT32: case UINT32: case INT64:
        ok = j instanceof BigDecimal && ((BigDecimal) j).compareTo(new BigDecimal(k.toString())) == 0;
        break;
      case FLOAT64:
        ok = j instanceof BigDecimal && ((BigDecimal) j).doubleValue() == (Double) k;
        break;
      case UUID: ok = Model.uuidHex((Uuid) k).equals(j); break;
      case STRING: ok = k.equals(j); break;
      case BYTES: case RECORDS: ok = ((Hex) k).hex.equals(j); break;
      case ARRAY: {
        if (!(j instanceof List)) {
          ok = false;
          break;
        }
        List<?> kl = (List<?>) k, jl = (List<?>) j;
        if (kl.size() != jl.size()) {
          out.add(p + ": json has " + jl.size() + " elements, kafka " + kl.size());
          return;
        }
        for (int i = 0; i < kl.size(); i++) compareValue(p + "[" + i + "]", kl.get(i), jl.get(i), t.elem, out);
        return;
      }
      case STRUCT: compareStruct(p, cast(k), j, t.struct, out); return;
      default: throw new IllegalStateException();
    }
    if (!ok) out.add(p + ": json=" + Json.brief(j) + " kafka=" + brief(k));
  }

  static String brief(Object k) {
    if (k == null) return "null";
    if (k instanceof String) {
      StringBuilder sb = new StringBuilder();
      writeString(sb, (String) k);
      return sb.toString();
    }
    if (k instanceof Uuid) return Model.uuidHex((Uuid) k);
    String s = k.toString();
    return s.length() > 80 ? s.substring(0, 77) + "..." : s;
  }
}
