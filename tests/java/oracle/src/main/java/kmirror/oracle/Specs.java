package kmirror.oracle;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.message.ApiMessageType;
import org.apache.kafka.common.message.CreateTopicsRequestData;
import org.apache.kafka.common.message.FetchRequestData;
import org.apache.kafka.common.message.RequestHeaderData;
import org.apache.kafka.common.message.ResponseHeaderData;
import org.apache.kafka.common.metadata.MetadataRecordType;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.types.Schema;

import kmirror.oracle.Model.FieldM;
import kmirror.oracle.Model.Kind;
import kmirror.oracle.Model.StructM;
import kmirror.oracle.Model.TypeM;

/**
 * Where the layout of each (api key, kind, version) comes from:
 * <ul>
 * <li>"kafka": the kafka-clients library (generated Schema + *Data class), bytes by the library;
 * <li>"overlay": a library layout plus the KIP-1279 additions the library does not have yet
 *     (Fetch v19 request, CreateTopics v8 request), encoded with the library's generic types;
 * <li>"alias": a version whose layout equals an older library version (Fetch v19 and
 *     CreateTopics v8 responses), encoded by the library at that older version;
 * <li>"kip-1279": the mirror RPCs (keys 95-105; CreateClusterMirror at 97, see Mirror.KEYS), written here from the KIP-1279 fact
 *     sheet's RPC catalogue (Gen-3 layouts) and encoded with the library's generic types.
 * </ul>
 * The KIP-1279 layouts below were written independently of kmirror's .kps files on purpose.
 */
final class Specs {
  private Specs() {}

  static final class Spec {
    final short apiKey;
    final String kind;       // request, response, reqheader, respheader, record, or a data message's name
    final short version;
    final String name;
    final String source;
    final StructM model;
    final Schema schema;     // the schema bytes are written/read with
    final Supplier<Message> data; // library class, or null
    final short dataVersion;

    Spec(short apiKey, String kind, short version, String name, String source, StructM model,
         Schema schema, Supplier<Message> data, short dataVersion) {
      this.apiKey = apiKey;
      this.kind = kind;
      this.version = version;
      this.name = name;
      this.source = source;
      this.model = model;
      this.schema = schema;
      this.data = data;
      this.dataVersion = dataVersion;
    }

    String id() { return apiKey + " " + kind + " v" + version + " (" + name + ", " + source + ")"; }
  }

  /** Kafka's versions for a key (request side), or null if the library lacks the key. */
  static short[] libraryRange(short key) {
    try {
      ApiMessageType t = ApiMessageType.fromApiKey(key);
      Schema[] s = t.requestSchemas();
      short lo = -1;
      for (short v = 0; v < s.length; v++) if (s[v] != null && lo < 0) lo = v;
      return new short[] {lo, (short) (s.length - 1)};
    } catch (UnsupportedVersionException | IllegalArgumentException e) {
      return null;
    }
  }

  static String libraryName(short key) {
    try {
      return ApiMessageType.fromApiKey(key).name();
    } catch (UnsupportedVersionException | IllegalArgumentException e) {
      return null;
    }
  }

  /** The spec for one vector kind, or null when the oracle has no layout for it. */
  static Spec lookup(short key, String kind, short v) {
    switch (kind) {
      case "reqheader":
        if (key != -1 || v < 0 || v >= RequestHeaderData.SCHEMAS.length || RequestHeaderData.SCHEMAS[v] == null) return null;
        return library(key, kind, v, "RequestHeader", RequestHeaderData.SCHEMAS[v], RequestHeaderData.class,
            RequestHeaderData::new, v);
      case "respheader":
        if (key != -1 || v < 0 || v >= ResponseHeaderData.SCHEMAS.length || ResponseHeaderData.SCHEMAS[v] == null) return null;
        return library(key, kind, v, "ResponseHeader", ResponseHeaderData.SCHEMAS[v], ResponseHeaderData.class,
            ResponseHeaderData::new, v);
      case "record":
        return record(key, v);
      case "request":
      case "response":
        break;
      default:
        return DATA.contains(kind) ? data(key, kind, v) : null;
    }
    boolean req = kind.equals("request");
    if (Mirror.KEYS.contains((int) key) && libraryName(key) == null) return v == 0 ? Mirror.spec(key, req) : null;
    if (key == Kbroker.WRITE_PLUGIN_RECORDS && libraryName(key) == null) return v == 0 ? Kbroker.spec(req) : null;
    ApiMessageType t;
    try {
      t = ApiMessageType.fromApiKey(key);
    } catch (UnsupportedVersionException | IllegalArgumentException e) {
      return null;
    }
    Schema[] schemas = req ? t.requestSchemas() : t.responseSchemas();
    Supplier<Message> ctor = req ? t::newRequest : t::newResponse;
    String name = ctor.get().getClass().getSimpleName().replaceAll("Data$", "");
    if (v >= 0 && v < schemas.length && schemas[v] != null) {
      Class<?> cls = ctor.get().getClass();
      return library(key, kind, v, name, schemas[v], cls, ctor, v);
    }
    // KIP-1279 versions the library does not have yet.
    if (key == 1 && v == 19 && schemas.length == 19) {
      if (!req) return alias(key, kind, v, name, schemas[18], ctor, (short) 18);
      StructM m = Model.fromLibrary(schemas[18], FetchRequestData.class);
      StructM part = m.field("Topics").type.elem.struct.field("Partitions").type.elem.struct;
      part.fields.add(new FieldM("MirrorLeaderEpoch", Model.prim(Kind.INT32, false, false), 3, -1, null));
      return new Spec(key, kind, v, name, "overlay", m, Model.toSchema(m), null, v);
    }
    if (key == 19 && v == 8 && schemas.length == 8) {
      if (!req) return alias(key, kind, v, name, schemas[7], ctor, (short) 7);
      StructM m = Model.fromLibrary(schemas[7], CreateTopicsRequestData.class);
      StructM topic = m.field("Topics").type.elem.struct;
      StructM info = new StructM("MirrorInfo", true, null);
      info.fields.add(new FieldM("MirrorName", Model.prim(Kind.STRING, true, true), null, null, null));
      info.fields.add(new FieldM("TopicId", Model.prim(Kind.UUID, false, false), null, Uuid.ZERO_UUID, null));
      // Untagged, nullable, default null, appended to CreatableTopic (after Configs).
      int lastPlain = 0;
      for (int i = 0; i < topic.fields.size(); i++) if (topic.fields.get(i).tag == null) lastPlain = i;
      topic.fields.add(lastPlain + 1, new FieldM("MirrorInfo",
          new TypeM(Kind.STRUCT, true, false, null, info), null, null, null));
      return new Spec(key, kind, v, name, "overlay", m, Model.toSchema(m), null, v);
    }
    return null;
  }

  /** The standalone messages ("data" in Kafka's schemas) the oracle knows, by class name. */
  static final List<String> DATA = List.of("DefaultPrincipalData");

  static Class<?> dataClass(String name) {
    try {
      return Class.forName("org.apache.kafka.common.message." + name);
    } catch (ClassNotFoundException e) {
      throw new IllegalStateException("no Kafka class for " + name, e);
    }
  }

  static Schema[] dataSchemas(String name) {
    try {
      return (Schema[]) dataClass(name).getField("SCHEMAS").get(null);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException(name + " has no SCHEMAS", e);
    }
  }

  /** A standalone message of kafka-clients (key -1, the kind is its name), or null. */
  static Spec data(short key, String name, short v) {
    Schema[] schemas = dataSchemas(name);
    if (key != -1 || v < 0 || v >= schemas.length || schemas[v] == null) return null;
    Class<?> cls = dataClass(name);
    Supplier<Message> ctor = () -> {
      try {
        return (Message) cls.getDeclaredConstructor().newInstance();
      } catch (ReflectiveOperationException e) {
        throw new IllegalStateException(e);
      }
    };
    return new Spec(key, name, v, name, "kafka-data", Model.fromLibrary(schemas[v], cls), schemas[v], ctor, v);
  }

  /** A KRaft metadata record type (kafka-metadata's generated classes), or null. */
  static Spec record(short type, short v) {
    if (type == Kbroker.PLUGIN_RECORD) return v == 0 ? Kbroker.record() : null;
    MetadataRecordType t;
    try {
      t = MetadataRecordType.fromId(type);
    } catch (UnsupportedVersionException | IllegalArgumentException e) {
      return null;
    }
    if (v < t.lowestSupportedVersion() || v > t.highestSupportedVersion()) return null;
    Supplier<Message> ctor = t::newMetadataRecord;
    ApiMessage m = t.newMetadataRecord();
    Schema[] schemas;
    try {
      schemas = (Schema[]) m.getClass().getField("SCHEMAS").get(null);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException(m.getClass().getName() + " has no SCHEMAS", e);
    }
    if (v >= schemas.length || schemas[v] == null) return null;
    return new Spec(type, "record", v, m.getClass().getSimpleName(), "kafka-metadata",
        Model.fromLibrary(schemas[v], m.getClass()), schemas[v], ctor, v);
  }

  static Spec library(short key, String kind, short v, String name, Schema schema, Class<?> cls,
                      Supplier<Message> ctor, short dataVersion) {
    return new Spec(key, kind, v, name, "kafka", Model.fromLibrary(schema, cls), schema, ctor, dataVersion);
  }

  static Spec alias(short key, String kind, short v, String name, Schema schema, Supplier<Message> ctor,
                    short dataVersion) {
    Class<?> cls = ctor.get().getClass();
    return new Spec(key, kind, v, name, "alias of v" + dataVersion, Model.fromLibrary(schema, cls), schema,
        ctor, dataVersion);
  }

  // ------------------------------------------------------------------- KIP-1279 mirror RPCs

  /**
   * kbroker's own additions, written here from docs/broker.md ("Plugin records"), independently of
   * the .kps files: the WritePluginRecords API (key 1000) and the KbrokerPluginRecord metadata
   * record (type 10000), both version 0, flexible. Kafka has no class for them: they are checked
   * with the library's generic Schema types (records framed as MetadataRecordSerde frames
   * Kafka's own).
   */
  static final class Kbroker {
    static final short WRITE_PLUGIN_RECORDS = 1000;
    static final short PLUGIN_RECORD = 10000;

    static Spec spec(boolean req) {
      String name = "WritePluginRecords";
      StructM m = req ? Mirror.msg(name + "Request",
              Mirror.f("BrokerId", Mirror.i32()),
              Mirror.f("BrokerEpoch", Mirror.i64(), -1L),
              Mirror.f("Records", Mirror.arr(Mirror.struct("PluginRecord",
                  Mirror.f("RecordType", Mirror.i32()),
                  Mirror.f("Key", bytes()),
                  Mirror.f("Value", nbytes(), null)))))
          : Mirror.stdResponse(name, Mirror.f("MetadataOffset", Mirror.i64(), -1L));
      return new Spec(WRITE_PLUGIN_RECORDS, req ? "request" : "response", (short) 0, m.name, "kbroker", m,
          Model.toSchema(m), null, (short) 0);
    }

    static Spec record() {
      StructM m = Mirror.msg("KbrokerPluginRecord",
          Mirror.f("RecordType", Mirror.i32()),
          Mirror.f("Key", bytes()),
          Mirror.f("Value", nbytes(), null));
      return new Spec(PLUGIN_RECORD, "record", (short) 0, m.name, "kbroker", m, Model.toSchema(m), null, (short) 0);
    }

    static TypeM bytes() { return Model.prim(Kind.BYTES, false, true); }
    static TypeM nbytes() { return Model.prim(Kind.BYTES, true, true); }
  }

  /** Hand-written layouts of the mirror RPCs (all: version 0, flexible, compact encodings). */
  static final class Mirror {
    /**
     * KIP-1279 gives CreateClusterMirror key 94, but Kafka 4.4.0 assigned 94 to
     * UnregisterController; kmirror moved CreateMirror to the free key 97 (whose Gen-1/2 owner,
     * LastMirroredOffsets, is gone), so the oracle follows: 97 here. Library keys always win.
     */
    static final List<Integer> KEYS = List.of(95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105);

    static Spec spec(short key, boolean req) {
      StructM m;
      String name;
      switch (key) {
        case 97:
          name = "CreateClusterMirror";
          m = req ? msg(name + "Request",
                  f("MirrorName", str()),
                  f("Config", arr(struct("ClusterMirrorConfig", f("Name", str()), f("Value", nstr())))))
              : stdResponse(name);
          break;
        case 95:
          // docs/design.md D10: the union of the prototype's two variants (explicit topics with
          // source ids and partition counts, and patterns), with per-topic results (AS33).
          name = "StartMirrorTopics";
          m = req ? msg(name + "Request",
                  f("MirrorName", str()),
                  f("Topics", arr(struct("TopicMetadata",
                      f("TopicId", uuid()), f("TopicName", str()), f("NumPartitions", i32())))),
                  f("IncludePatterns", arr(str())),
                  tagged(0, "ExcludePatterns", arr(str()), new ArrayList<>()),
                  f("TimeoutMs", i32()))
              : stdResponse(name,
                  f("Topics", arr(struct("TopicResult",
                      f("TopicName", str()), f("ErrorCode", i16()), f("ErrorMessage", nstr(), null)))));
          break;
        case 96:
          name = "StopMirrorTopics";
          m = req ? msg(name + "Request",
                  f("MirrorName", str()),
                  f("Topics", arr(struct("TopicMetadata", f("TopicName", str())))),
                  tagged(0, "Patterns", arr(str()), new ArrayList<>()),
                  f("StateOffset", i64(), -1L))
              : stdResponse(name,
                  f("Topics", arr(struct("TopicResult", f("Name", str()), f("ErrorCode", i16()),
                      f("ErrorMessage", nstr(), null)))));
          break;
        case 98:
          // The seed's ListMirrors: a request without fields ("no parameters required") and the
          // seed's ListMirrorsResponse layout.
          name = "ListClusterMirrors";
          m = req ? msg(name + "Request")
              : stdResponse(name,
                  f("Mirrors", arr(struct("ListedMirror",
                      f("MirrorName", str()),
                      f("SourceBootstrap", str()),
                      f("SourceClusterId", str(), ""),
                      f("TopicCount", i32(), 0)))));
          break;
        case 99:
          name = "DescribeClusterMirrors";
          m = req ? msg(name + "Request",
                  f("MirrorNames", narr(str()), null),
                  f("IncludeAuthorizedOperations", bool(), false),
                  tagged(0, "ClusterId", nstr(), null),
                  tagged(1, "LastMirrorEpochLookups", arr(struct("LastMirrorEpochLookup",
                      f("TopicId", uuid()), f("Partitions", arr(i32())))), new ArrayList<>()))
              : stdResponse(name,
                  f("Mirrors", arr(struct("DescribedMirror",
                      f("ErrorCode", i16()),
                      f("ErrorMessage", nstr(), null),
                      f("MirrorName", str()),
                      f("SourceBootstrap", nstr(), null),
                      f("SourceClusterId", nstr(), null),
                      f("AuthorizedOperations", i32(), Integer.MIN_VALUE),
                      f("Topics", arr(struct("TopicResult",
                          f("TopicName", str()),
                          f("Partitions", arr(struct("PartitionDetail",
                              f("PartitionIndex", i32()),
                              f("StateValue", str()),
                              f("ErrorMessage", nstr(), null),
                              f("RetryAttempt", i16(), (short) 0),
                              f("SourceOffset", i64(), -1L),
                              f("DestinationOffset", i64(), -1L),
                              f("LastMirrorEpoch", i32(), -1),
                              f("LastMirrorOffset", i64(), -1L))))))),
                      tagged(0, "SyncStatus", arr(struct("SyncKindStatus",
                          f("Kind", str()),
                          f("Enabled", bool(), false),
                          f("Runs", i64()),
                          f("Errors", i64()),
                          f("LastError", nstr(), null),
                          f("LastErrorTimeMs", i64(), -1L),
                          f("LastSyncTimeMs", i64(), -1L))), new ArrayList<>())))));
          break;
        case 100:
          name = "ReadMirrorStates";
          m = req ? msg(name + "Request",
                  f("MirrorName", str()),
                  f("Topics", arr(struct("TopicMetadata",
                      f("TopicName", str()),
                      tagged(0, "TopicId", uuid(), Uuid.ZERO_UUID),
                      f("Partitions", arr(struct("PartitionData", f("PartitionIndex", i32()))))))))
              : stdResponse(name,
                  f("Topics", arr(struct("TopicResult",
                      f("TopicName", str()),
                      f("Partitions", arr(struct("PartitionResult",
                          f("PartitionIndex", i32()),
                          f("State", i8()),
                          f("LeaderEpoch", i32(), -1),
                          f("StateEpoch", i32(), 0),
                          f("LastMirrorEpoch", i32(), -1),
                          f("LastMirrorOffset", i64(), -1L),
                          f("ErrorCode", i16()),
                          f("ErrorMessage", nstr(), null),
                          f("RetryAttempt", i16(), (short) 0),
                          f("PreviousState", i8(), (byte) -1))))))));
          break;
        case 101:
          name = "WriteMirrorStates";
          m = req ? msg(name + "Request",
                  f("MirrorName", str()),
                  f("Topics", arr(struct("TopicMetadata",
                      f("TopicName", str()),
                      tagged(0, "TopicId", uuid(), Uuid.ZERO_UUID),
                      f("Partitions", arr(struct("PartitionData",
                          f("PartitionIndex", i32()),
                          f("State", i8()),
                          f("LeaderEpoch", i32(), -1),
                          f("StateEpoch", i32(), -1),
                          f("LastMirrorEpoch", i32(), -1),
                          f("LastMirrorOffset", i64(), -1L),
                          f("ErrorMessage", nstr(), null),
                          f("RetryAttempt", i32(), -1),
                          f("NonRetryable", bool(), false))))))))
              : stdResponse(name,
                  f("Topics", arr(struct("TopicResult",
                      f("TopicName", str()),
                      f("Partitions", arr(struct("PartitionResult",
                          f("PartitionIndex", i32()),
                          f("StateEpoch", i32(), -1),
                          f("ErrorCode", i16()),
                          f("ErrorMessage", nstr(), null))))))));
          break;
        case 102:
        case 103:
          name = key == 102 ? "PauseMirrorTopics" : "ResumeMirrorTopics";
          m = req ? msg(name + "Request",
                  f("MirrorName", str()),
                  f("Topics", arr(struct("TopicMetadata", f("TopicName", str())))),
                  f("StateOffset", i64(), -1L))
              : key == 102
              ? stdResponse(name,
                  f("Topics", arr(struct("TopicResult",
                      f("TopicName", str()), f("ErrorCode", i16()), f("ErrorMessage", nstr(), null)))))
              // The seed's ResumeMirrorTopicsResponse (ARCHITECTURE.md section 4: a seed layout wins).
              : stdResponse(name,
                  f("MirrorName", str()),
                  f("Topics", arr(struct("TopicResult", f("Name", str()), f("ErrorCode", i16())))));
          break;
        case 104:
          name = "DeleteClusterMirror";
          m = req ? msg(name + "Request", f("MirrorName", str()), f("StateOffset", i64(), -1L))
              : stdResponse(name);
          break;
        case 105:
          name = "BumpLeaderEpochs";
          m = req ? msg(name + "Request",
                  f("Topics", arr(struct("TopicState",
                      f("TopicName", str()),
                      f("Partitions", arr(struct("LeaderEpochState",
                          f("PartitionIndex", i32()),
                          f("MinLeaderEpoch", i32(), -1))))))))
              : stdResponse(name,
                  f("Topics", arr(struct("TopicPartitions",
                      f("TopicName", str()),
                      f("Partitions", arr(struct("PartitionDetail",
                          f("PartitionIndex", i32()),
                          f("ErrorCode", i16()),
                          f("ErrorMessage", nstr(), null))))))));
          break;
        default:
          return null;
      }
      return new Spec(key, req ? "request" : "response", (short) 0, m.name, "kip-1279", m,
          Model.toSchema(m), null, (short) 0);
    }

    /** ThrottleTimeMs, ErrorCode, ErrorMessage (nullable, default null), then {@code more}. */
    static StructM stdResponse(String name, FieldM... more) {
      List<FieldM> fs = new ArrayList<>();
      fs.add(f("ThrottleTimeMs", i32()));
      fs.add(f("ErrorCode", i16()));
      fs.add(f("ErrorMessage", nstr(), null));
      fs.addAll(List.of(more));
      return msg(name + "Response", fs.toArray(new FieldM[0]));
    }

    // --- builder: every type compact (version 0 is flexible), every struct flexible.
    static TypeM str() { return Model.prim(Kind.STRING, false, true); }
    static TypeM nstr() { return Model.prim(Kind.STRING, true, true); }
    static TypeM bool() { return Model.prim(Kind.BOOL, false, true); }
    static TypeM i8() { return Model.prim(Kind.INT8, false, true); }
    static TypeM i16() { return Model.prim(Kind.INT16, false, true); }
    static TypeM i32() { return Model.prim(Kind.INT32, false, true); }
    static TypeM i64() { return Model.prim(Kind.INT64, false, true); }
    static TypeM uuid() { return Model.prim(Kind.UUID, false, true); }
    static TypeM arr(TypeM e) { return new TypeM(Kind.ARRAY, false, true, e, null); }
    static TypeM narr(TypeM e) { return new TypeM(Kind.ARRAY, true, true, e, null); }

    static TypeM struct(String name, FieldM... fs) {
      StructM s = new StructM(name, true, null);
      s.fields.addAll(List.of(fs));
      return new TypeM(Kind.STRUCT, false, true, null, s);
    }

    static StructM msg(String name, FieldM... fs) { return struct(name, fs).struct; }

    /** Untagged field with the natural default (0, false, "", zero uuid, [], struct of defaults). */
    static FieldM f(String name, TypeM t) { return new FieldM(name, t, null, naturalDefault(t), null); }

    static FieldM f(String name, TypeM t, Object dflt) { return new FieldM(name, t, null, dflt, null); }

    static FieldM tagged(int tag, String name, TypeM t, Object dflt) { return new FieldM(name, t, tag, dflt, null); }

    static Object naturalDefault(TypeM t) {
      switch (t.kind) {
        case BOOL: return false;
        case INT8: return (byte) 0;
        case INT16: return (short) 0;
        case INT32: case UINT16: return 0;
        case INT64: case UINT32: return 0L;
        case FLOAT64: return 0.0;
        case UUID: return Uuid.ZERO_UUID;
        case STRING: return "";
        case BYTES: case RECORDS: return new Model.Hex(new byte[0]);
        case ARRAY: return new ArrayList<>();
        case STRUCT: {
          if (t.nullable) return null;
          Map<String, Object> m = new LinkedHashMap<>();
          for (FieldM f : t.struct.fields) m.put(f.name, f.dflt);
          return m;
        }
        default: throw new IllegalStateException();
      }
    }
  }
}
