package kmirror.oracle;

import java.lang.reflect.Modifier;
import java.lang.reflect.ParameterizedType;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.TreeMap;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.protocol.types.ArrayOf;
import org.apache.kafka.common.protocol.types.BoundField;
import org.apache.kafka.common.protocol.types.CompactArrayOf;
import org.apache.kafka.common.protocol.types.Field;
import org.apache.kafka.common.protocol.types.NullableSchema;
import org.apache.kafka.common.protocol.types.Schema;
import org.apache.kafka.common.protocol.types.Struct;
import org.apache.kafka.common.protocol.types.TaggedFields;
import org.apache.kafka.common.protocol.types.Type;
import org.apache.kafka.common.record.internal.BaseRecords;
import org.apache.kafka.common.record.internal.MemoryRecords;

/**
 * A small, version-specific model of one message layout (fields in wire order, tagged fields with
 * their tags and defaults), built either from Apache Kafka's generated classes (the Schema of a
 * version plus the *Data class for defaults) or written by hand for messages the library lacks.
 *
 * <p>Values of a message are kept as a plain tree: Boolean, Byte, Short, Integer (int32, uint16),
 * Long (int64, uint32), Double, String, {@link Hex} (bytes, records), Uuid, List (arrays),
 * LinkedHashMap keyed by field name (structs), null.
 */
final class Model {
  private Model() {}

  enum Kind { BOOL, INT8, INT16, UINT16, INT32, UINT32, INT64, FLOAT64, UUID, STRING, BYTES, RECORDS, ARRAY, STRUCT }

  /** Bytes and records values: lowercase hex, compared by content. */
  static final class Hex {
    final String hex;

    Hex(byte[] b) { this.hex = toHex(b); }

    @Override public boolean equals(Object o) { return o instanceof Hex && ((Hex) o).hex.equals(hex); }
    @Override public int hashCode() { return hex.hashCode(); }
    @Override public String toString() { return hex; }

    byte[] bytes() { return fromHex(hex); }
  }

  static final class TypeM {
    final Kind kind;
    final boolean nullable;
    final boolean compact;   // compact (flexible) encoding of strings, bytes, records, arrays
    final TypeM elem;        // ARRAY
    final StructM struct;    // STRUCT

    TypeM(Kind kind, boolean nullable, boolean compact, TypeM elem, StructM struct) {
      this.kind = kind;
      this.nullable = nullable;
      this.compact = compact;
      this.elem = elem;
      this.struct = struct;
    }

    @Override public String toString() {
      String s = kind == Kind.ARRAY ? "[]" + elem : kind == Kind.STRUCT ? struct.name : kind.name().toLowerCase();
      return s + (nullable ? "?" : "");
    }
  }

  static final class FieldM {
    final String name;           // CamelCase, as in Kafka's JSON schemas
    final TypeM type;
    final Integer tag;           // null: not tagged
    final Object dflt;           // default value (tree form)
    final java.lang.reflect.Field javaField; // library-backed: the *Data class field, else null

    FieldM(String name, TypeM type, Integer tag, Object dflt, java.lang.reflect.Field javaField) {
      this.name = name;
      this.type = type;
      this.tag = tag;
      this.dflt = dflt;
      this.javaField = javaField;
    }
  }

  static final class StructM {
    final String name;
    final List<FieldM> fields = new ArrayList<>();
    final boolean flexible;      // has a tagged-fields section
    final Class<?> javaClass;    // library-backed: the class to instantiate, else null

    StructM(String name, boolean flexible, Class<?> javaClass) {
      this.name = name;
      this.flexible = flexible;
      this.javaClass = javaClass;
    }

    FieldM field(String name) {
      for (FieldM f : fields) if (f.name.equals(name)) return f;
      throw new IllegalArgumentException(this.name + " has no field " + name);
    }
  }

  static String norm(String s) { return s.replace("_", "").toLowerCase(); }

  // ------------------------------------------------------------------ from Apache Kafka's classes

  /**
   * Builds the model of one version's Schema, taking field names and defaults from the matching
   * generated class (a *Data class or one of its nested classes).
   */
  static StructM fromLibrary(Schema schema, Class<?> cls) {
    Object fresh;
    try {
      fresh = cls.getDeclaredConstructor().newInstance();
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("cannot instantiate " + cls.getName(), e);
    }
    Map<String, java.lang.reflect.Field> byNorm = new LinkedHashMap<>();
    for (java.lang.reflect.Field jf : cls.getDeclaredFields()) {
      if (Modifier.isStatic(jf.getModifiers()) || jf.getName().startsWith("_")) continue;
      jf.setAccessible(true);
      byNorm.put(norm(jf.getName()), jf);
    }
    boolean flexible = false;
    List<Object[]> parts = new ArrayList<>(); // {Field, Integer tag or null}
    for (BoundField bf : schema.fields()) {
      if (bf.def instanceof Field.TaggedFieldsSection) {
        flexible = true;
        TaggedFields tf = (TaggedFields) bf.def.type;
        for (Map.Entry<Integer, Field> e : new TreeMap<>(tf.fields()).entrySet()) {
          parts.add(new Object[] {e.getValue(), e.getKey()});
        }
      } else {
        parts.add(new Object[] {bf.def, null});
      }
    }
    StructM s = new StructM(cls.getSimpleName(), flexible, cls);
    for (Object[] p : parts) {
      Field f = (Field) p[0];
      java.lang.reflect.Field jf = byNorm.get(norm(f.name));
      if (jf == null) {
        throw new IllegalStateException(cls.getName() + ": no Java field for schema field " + f.name);
      }
      TypeM t = typeFromLibrary(f.type, jf.getGenericType());
      String name = Character.toUpperCase(jf.getName().charAt(0)) + jf.getName().substring(1);
      Object dflt;
      try {
        dflt = javaToTree(jf.get(fresh), t);
      } catch (IllegalAccessException e) {
        throw new IllegalStateException(e);
      }
      s.fields.add(new FieldM(name, t, (Integer) p[1], dflt, jf));
    }
    return s;
  }

  static TypeM typeFromLibrary(Type t, java.lang.reflect.Type jt) {
    if (t == Type.BOOLEAN) return prim(Kind.BOOL, false, false);
    if (t == Type.INT8) return prim(Kind.INT8, false, false);
    if (t == Type.INT16) return prim(Kind.INT16, false, false);
    if (t == Type.UINT16) return prim(Kind.UINT16, false, false);
    if (t == Type.INT32) return prim(Kind.INT32, false, false);
    if (t == Type.UNSIGNED_INT32) return prim(Kind.UINT32, false, false);
    if (t == Type.INT64) return prim(Kind.INT64, false, false);
    if (t == Type.FLOAT64) return prim(Kind.FLOAT64, false, false);
    if (t == Type.UUID) return prim(Kind.UUID, false, false);
    if (t == Type.STRING) return prim(Kind.STRING, false, false);
    if (t == Type.NULLABLE_STRING) return prim(Kind.STRING, true, false);
    if (t == Type.COMPACT_STRING) return prim(Kind.STRING, false, true);
    if (t == Type.COMPACT_NULLABLE_STRING) return prim(Kind.STRING, true, true);
    if (t == Type.BYTES) return prim(Kind.BYTES, false, false);
    if (t == Type.NULLABLE_BYTES) return prim(Kind.BYTES, true, false);
    if (t == Type.COMPACT_BYTES) return prim(Kind.BYTES, false, true);
    if (t == Type.COMPACT_NULLABLE_BYTES) return prim(Kind.BYTES, true, true);
    if (t == Type.RECORDS) return prim(Kind.RECORDS, false, false);
    if (t == Type.NULLABLE_RECORDS) return prim(Kind.RECORDS, true, false);
    if (t == Type.COMPACT_RECORDS) return prim(Kind.RECORDS, false, true);
    if (t == Type.COMPACT_NULLABLE_RECORDS) return prim(Kind.RECORDS, true, true);
    if (t instanceof ArrayOf || t instanceof CompactArrayOf) {
      Type et = t.arrayElementType().orElseThrow();
      return new TypeM(Kind.ARRAY, t.isNullable(), t instanceof CompactArrayOf,
          typeFromLibrary(et, elementJavaType(jt)), null);
    }
    if (t instanceof Schema) {
      Class<?> c = (Class<?>) jt;
      return new TypeM(Kind.STRUCT, t instanceof NullableSchema, false, null, fromLibrary((Schema) t, c));
    }
    throw new IllegalStateException("unsupported library type " + t);
  }

  /** Element type of a List<X> or of a generated collection class (extends ...Collection<X>). */
  static java.lang.reflect.Type elementJavaType(java.lang.reflect.Type jt) {
    java.lang.reflect.Type cur = jt;
    for (int depth = 0; depth < 8 && cur != null; depth++) {
      if (cur instanceof ParameterizedType) {
        ParameterizedType pt = (ParameterizedType) cur;
        if (pt.getActualTypeArguments().length == 1) return pt.getActualTypeArguments()[0];
        cur = ((Class<?>) pt.getRawType()).getGenericSuperclass();
      } else if (cur instanceof Class) {
        cur = ((Class<?>) cur).getGenericSuperclass();
      } else {
        break;
      }
    }
    throw new IllegalStateException("cannot find the element type of " + jt);
  }

  static TypeM prim(Kind k, boolean nullable, boolean compact) { return new TypeM(k, nullable, compact, null, null); }

  /** Converts a value held by a generated *Data object to the tree form. */
  static Object javaToTree(Object v, TypeM t) {
    if (v == null) return null;
    switch (t.kind) {
      case BOOL: case INT8: case INT16: case INT32: case INT64: case FLOAT64: case STRING:
        return v;
      case UINT16: return ((Number) v).intValue();
      case UINT32: return ((Number) v).longValue();
      case UUID: return v;
      case BYTES:
        if (v instanceof byte[]) return new Hex((byte[]) v);
        return new Hex(bufBytes((ByteBuffer) v));
      case RECORDS:
        if (v instanceof MemoryRecords) return new Hex(bufBytes(((MemoryRecords) v).buffer()));
        throw new IllegalStateException("records of class " + v.getClass());
      case ARRAY: {
        List<Object> out = new ArrayList<>();
        for (Object e : (Collection<?>) v) out.add(javaToTree(e, t.elem));
        return out;
      }
      case STRUCT: {
        Map<String, Object> m = new LinkedHashMap<>();
        for (FieldM f : t.struct.fields) {
          try {
            m.put(f.name, javaToTree(f.javaField.get(v), f.type));
          } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
          }
        }
        return m;
      }
      default: throw new IllegalStateException();
    }
  }

  static byte[] bufBytes(ByteBuffer b) {
    ByteBuffer d = b.duplicate();
    byte[] out = new byte[d.remaining()];
    d.get(out);
    return out;
  }

  // -------------------------------------------------------------- to the library's generic types

  /** A library Schema for a model (used for hand-written layouts and library overlays). */
  static Schema toSchema(StructM s) {
    List<Field> plain = new ArrayList<>();
    List<Object> tagged = new ArrayList<>();
    for (FieldM f : s.fields) {
      Field lf = new Field(f.name, toType(f.type), f.name);
      if (f.tag == null) plain.add(lf);
      else {
        tagged.add(f.tag);
        tagged.add(lf);
      }
    }
    if (s.flexible) plain.add(Field.TaggedFieldsSection.of(tagged.toArray()));
    else if (!tagged.isEmpty()) throw new IllegalStateException(s.name + ": tagged fields in a non-flexible struct");
    return new Schema(plain.toArray(new Field[0]));
  }

  static Type toType(TypeM t) {
    switch (t.kind) {
      case BOOL: return Type.BOOLEAN;
      case INT8: return Type.INT8;
      case INT16: return Type.INT16;
      case UINT16: return Type.UINT16;
      case INT32: return Type.INT32;
      case UINT32: return Type.UNSIGNED_INT32;
      case INT64: return Type.INT64;
      case FLOAT64: return Type.FLOAT64;
      case UUID: return Type.UUID;
      case STRING:
        return t.compact ? (t.nullable ? Type.COMPACT_NULLABLE_STRING : Type.COMPACT_STRING)
            : (t.nullable ? Type.NULLABLE_STRING : Type.STRING);
      case BYTES:
        return t.compact ? (t.nullable ? Type.COMPACT_NULLABLE_BYTES : Type.COMPACT_BYTES)
            : (t.nullable ? Type.NULLABLE_BYTES : Type.BYTES);
      case RECORDS:
        return t.compact ? (t.nullable ? Type.COMPACT_NULLABLE_RECORDS : Type.COMPACT_RECORDS)
            : (t.nullable ? Type.NULLABLE_RECORDS : Type.RECORDS);
      case ARRAY: {
        Type et = toType(t.elem);
        if (t.compact) return t.nullable ? CompactArrayOf.nullable(et) : new CompactArrayOf(et);
        return t.nullable ? ArrayOf.nullable(et) : new ArrayOf(et);
      }
      case STRUCT: {
        Schema sc = toSchema(t.struct);
        return t.nullable ? new NullableSchema(sc) : sc;
      }
      default: throw new IllegalStateException();
    }
  }

  /** Tree -> library Struct for {@code schema} (whose fields match {@code s} in order). */
  static Struct toStruct(Map<String, Object> v, StructM s, Schema schema) {
    Struct st = new Struct(schema);
    NavigableMap<Integer, Object> tags = new TreeMap<>();
    Map<Integer, Field> tagDefs = null;
    for (BoundField bf : schema.fields()) {
      if (bf.def instanceof Field.TaggedFieldsSection) tagDefs = ((TaggedFields) bf.def.type).fields();
    }
    int plainIdx = 0;
    BoundField[] bfs = schema.fields();
    for (FieldM f : s.fields) {
      Object val = v.get(f.name);
      if (f.tag == null) {
        BoundField bf = bfs[plainIdx++];
        st.set(bf, toLib(val, f.type, bf.def.type));
      } else if (!java.util.Objects.equals(val, f.dflt)) {
        tags.put(f.tag, toLib(val, f.type, tagDefs.get(f.tag).type));
      }
    }
    if (s.flexible) st.set(bfs[bfs.length - 1], tags);
    return st;
  }

  static Object toLib(Object v, TypeM t, Type lt) {
    if (v == null) return null;
    switch (t.kind) {
      case BOOL: case INT8: case INT16: case INT32: case INT64: case FLOAT64: case STRING: case UUID:
      case UINT16: case UINT32:
        return v;
      case BYTES: return ByteBuffer.wrap(((Hex) v).bytes());
      case RECORDS: return MemoryRecords.readableRecords(ByteBuffer.wrap(((Hex) v).bytes()));
      case ARRAY: {
        List<?> l = (List<?>) v;
        Type et = lt.arrayElementType().orElseThrow();
        Object[] out = new Object[l.size()];
        for (int i = 0; i < out.length; i++) out[i] = toLib(l.get(i), t.elem, et);
        return out;
      }
      case STRUCT: {
        @SuppressWarnings("unchecked")
        Map<String, Object> m = (Map<String, Object>) v;
        return toStruct(m, t.struct, (Schema) lt);
      }
      default: throw new IllegalStateException();
    }
  }

  /** Library Struct -> tree (absent tagged fields take their defaults). */
  static Map<String, Object> fromStruct(Struct st, StructM s) {
    Map<String, Object> out = new LinkedHashMap<>();
    BoundField[] bfs = st.schema().fields();
    Map<?, ?> tags = s.flexible ? (Map<?, ?>) st.get(bfs[bfs.length - 1]) : Map.of();
    int plainIdx = 0;
    for (FieldM f : s.fields) {
      if (f.tag == null) {
        out.put(f.name, fromLib(st.get(bfs[plainIdx++]), f.type));
      } else {
        out.put(f.name, tags.containsKey(f.tag) ? fromLib(tags.get(f.tag), f.type) : f.dflt);
      }
    }
    return out;
  }

  static Object fromLib(Object v, TypeM t) {
    if (v == null) return null;
    switch (t.kind) {
      case BOOL: case INT8: case INT16: case INT32: case INT64: case FLOAT64: case STRING: case UUID:
        return v;
      case UINT16: return ((Number) v).intValue();
      case UINT32: return ((Number) v).longValue();
      case BYTES: return new Hex(bufBytes((ByteBuffer) v));
      case RECORDS: {
        if (v instanceof MemoryRecords) return new Hex(bufBytes(((MemoryRecords) v).buffer()));
        throw new IllegalStateException("records of class " + v.getClass() + " (" + BaseRecords.class + ")");
      }
      case ARRAY: {
        List<Object> out = new ArrayList<>();
        for (Object e : (Object[]) v) out.add(fromLib(e, t.elem));
        return out;
      }
      case STRUCT: return fromStruct((Struct) v, t.struct);
      default: throw new IllegalStateException();
    }
  }

  // ------------------------------------------------------------------------------------ helpers

  static String toHex(byte[] b) {
    StringBuilder sb = new StringBuilder(b.length * 2);
    for (byte x : b) sb.append(Character.forDigit((x >> 4) & 15, 16)).append(Character.forDigit(x & 15, 16));
    return sb.toString();
  }

  static byte[] fromHex(String s) {
    if (s.length() % 2 != 0) throw new IllegalArgumentException("odd hex length");
    byte[] out = new byte[s.length() / 2];
    for (int i = 0; i < out.length; i++) {
      int hi = Character.digit(s.charAt(2 * i), 16), lo = Character.digit(s.charAt(2 * i + 1), 16);
      if (hi < 0 || lo < 0) throw new IllegalArgumentException("bad hex digit near offset " + 2 * i);
      out[i] = (byte) (hi << 4 | lo);
    }
    return out;
  }

  static String uuidHex(Uuid u) {
    return String.format("%016x%016x", u.getMostSignificantBits(), u.getLeastSignificantBits());
  }
}
