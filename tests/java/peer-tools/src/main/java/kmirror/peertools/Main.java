package kmirror.peertools;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.zip.CRC32C;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Small CLI around the Java clients for the interop tests.
 *
 * <pre>
 * wait-ready         --bootstrap B --brokers N [--timeout-ms T]
 * describe-cluster   --bootstrap B
 * admin-create-topic --bootstrap B --topic T --partitions P --rf R [--config k=v]... [--timeout-ms T]
 * produce            --bootstrap B --topic T --count N [--seed S] [--size BYTES] [--acks all]
 *                    [--idempotent true] [--compression none|gzip|snappy|lz4|zstd] [--linger-ms L]
 *                    [--rate R]
 *                    [--transactional-id ID [--txn-records R] [--abort-every K]
 *                     [--open-records O --release-file F [--hold-ms H]]]
 * consume-verify     --bootstrap B --topic T --count N [--seed S] [--size BYTES]
 *                    [--expect-sha256 HEX] [--timeout-ms T]
 * consume-group      --bootstrap B --topic T --group G --duration-ms D [--sessions K]
 *                    [--min-records R] [--timeout-ms T] [--records-out FILE]
 * </pre>
 *
 * Record i (0-based) goes to partition i % P. Its key is "key-i", its value SIZE bytes from a
 * generator seeded with (seed, i), its headers "idx" (int64 i) and "crc" (CRC32C of the value).
 * produce and consume-verify both print sha256=<hex> over (key, value) of every record in index
 * order, so two processes can compare what was written with what was read.
 * produce --transactional-id: R records (default 50) per transaction; with --abort-every K every
 * K-th transaction (the K-th, 2K-th, ...) is flushed (all its records acknowledged) and then
 * aborted. The sha256 then covers the committed records only, and the summary line also says
 * "committed C aborted A transactions".
 * produce --rate R: at most R records a second (record i is sent no earlier than i/R s after the
 * first), so that a test can act while the producer still writes; default 0, no limit.
 * produce --open-records O (transactional only): after the N records, one more transaction of O
 * records (indices N..N+O-1) is begun and flushed (all acknowledged), a line "open transaction:
 * O records flushed, neither committed nor aborted" is printed, and the producer then holds it
 * open until the file F exists (polled; at most H ms, default 300000, then it fails), aborts it
 * and exits. Its records are not in the sha256.
 * consume-group: K consumers of group G (subscribe, classic protocol), one after the other, each
 * for D/K ms and until it has read a record (a slow group join must not leave a session empty);
 * the last one also until it has read R records in all (default 0: records still being mirrored
 * may not have reached the log end yet) and its positions reach the log end offsets; all of it
 * within T ms
 * (default 90000; exit 1 when not). Every poll that returned records is committed synchronously
 * (the positions, with the leader epoch of the last record, as KafkaConsumer commits them). A
 * session resumes at the group's committed offsets (earliest without). Per partition every
 * record's offset must be above the previous one (none read twice, across sessions too). Prints
 * one line per session and
 * "consume-group: R records in K sessions, max record leader epoch E, committed P=OFFSET@EPOCH,...".
 * --records-out FILE: every record read is also written to FILE as a line
 * "PARTITION OFFSET LEADER_EPOCH VALUE" (value as UTF-8, -1 for no epoch), in the order read.
 * Exit status: 0 ok, 1 verification/operation failure, 64 usage error.
 */
public final class Main {
  private Main() {}

  public static void main(String[] argv) throws Exception {
    if (argv.length < 1) usage("missing subcommand");
    Opts o = new Opts(Arrays.copyOfRange(argv, 1, argv.length));
    int rc;
    switch (argv[0]) {
      case "wait-ready": rc = waitReady(o); break;
      case "describe-cluster": rc = describeCluster(o); break;
      case "admin-create-topic": rc = createTopic(o); break;
      case "produce": rc = produce(o); break;
      case "consume-verify": rc = consumeVerify(o); break;
      case "consume-group": rc = consumeGroup(o); break;
      default: usage("unknown subcommand " + argv[0]); rc = 64;
    }
    System.out.flush();
    System.exit(rc);
  }

  static void usage(String why) {
    System.err.println("peer-tools: " + why);
    System.err.println("subcommands: wait-ready, describe-cluster, admin-create-topic, produce, consume-verify, consume-group");
    System.exit(64);
  }

  /** --key value options; repeated keys accumulate. */
  static final class Opts {
    final Map<String, List<String>> m = new HashMap<>();

    Opts(String[] a) {
      for (int i = 0; i < a.length; i++) {
        if (!a[i].startsWith("--") || i + 1 >= a.length) usage("bad option near '" + a[i] + "'");
        m.computeIfAbsent(a[i].substring(2), k -> new ArrayList<>()).add(a[++i]);
      }
    }

    String str(String k, String def) {
      List<String> v = m.get(k);
      if (v == null) {
        if (def == null) usage("missing --" + k);
        return def;
      }
      return v.get(v.size() - 1);
    }

    String str(String k) { return str(k, null); }
    long num(String k, long def) { return Long.parseLong(str(k, Long.toString(def))); }
    long num(String k) { return Long.parseLong(str(k)); }
    List<String> all(String k) { return m.getOrDefault(k, List.of()); }
  }

  static Properties common(Opts o) {
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, o.str("bootstrap"));
    p.put(AdminClientConfig.CLIENT_ID_CONFIG, "kmirror-peer-tools");
    return p;
  }

  static Admin admin(String bootstrap) {
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(AdminClientConfig.CLIENT_ID_CONFIG, "kmirror-peer-tools");
    p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
    p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "5000");
    p.put(AdminClientConfig.RECONNECT_BACKOFF_MS_CONFIG, "100");
    p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
    p.put(AdminClientConfig.RETRY_BACKOFF_MS_CONFIG, "100");
    return Admin.create(p);
  }

  static String rootCause(Throwable t) {
    while (t.getCause() != null && t.getCause() != t) t = t.getCause();
    return t.getClass().getSimpleName() + ": " + t.getMessage();
  }

  // ---------------------------------------------------------------------------------- wait-ready

  /**
   * Polls until every address in --bootstrap answers DescribeCluster on its own and each reports
   * at least --brokers live brokers. One JVM for the whole wait.
   */
  static int waitReady(Opts o) throws Exception {
    String[] addrs = o.str("bootstrap").split(",");
    int want = (int) o.num("brokers");
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(o.num("timeout-ms", 120_000));
    long t0 = System.nanoTime();
    Admin[] admins = new Admin[addrs.length];
    for (int i = 0; i < addrs.length; i++) admins[i] = admin(addrs[i].trim());
    String last = "no attempt";
    try {
      while (System.nanoTime() < deadline) {
        boolean all = true;
        for (int i = 0; i < addrs.length && all; i++) {
          try {
            DescribeClusterResult r = admins[i].describeCluster(new DescribeClusterOptions().timeoutMs(2000));
            Collection<Node> nodes = r.nodes().get(3, TimeUnit.SECONDS);
            if (nodes.size() < want) {
              all = false;
              last = addrs[i] + " sees " + nodes.size() + "/" + want + " brokers";
            }
          } catch (Exception e) {
            all = false;
            last = addrs[i] + ": " + rootCause(e);
          }
        }
        if (all) {
          System.out.printf("ready: %d brokers answer at %s after %.1f s%n", want, o.str("bootstrap"),
              (System.nanoTime() - t0) / 1e9);
          return 0;
        }
        Thread.sleep(250);
      }
    } finally {
      for (Admin a : admins) a.close(Duration.ofSeconds(2));
    }
    System.err.println("wait-ready: timed out; last: " + last);
    return 1;
  }

  // ---------------------------------------------------------------------------- describe-cluster

  static int describeCluster(Opts o) throws Exception {
    try (Admin a = admin(o.str("bootstrap"))) {
      DescribeClusterResult r = a.describeCluster();
      System.out.println("cluster.id=" + r.clusterId().get());
      Node c = r.controller().get();
      System.out.println("controller=" + (c == null ? "none" : c.idString()));
      for (Node n : r.nodes().get()) {
        System.out.println("node " + n.id() + " " + n.host() + ":" + n.port()
            + (n.rack() != null ? " rack=" + n.rack() : ""));
      }
    }
    return 0;
  }

  // -------------------------------------------------------------------------- admin-create-topic

  static int createTopic(Opts o) throws Exception {
    String topic = o.str("topic");
    int parts = (int) o.num("partitions");
    short rf = (short) o.num("rf");
    Map<String, String> cfg = new HashMap<>();
    for (String kv : o.all("config")) {
      int eq = kv.indexOf('=');
      if (eq <= 0) usage("bad --config " + kv);
      cfg.put(kv.substring(0, eq), kv.substring(eq + 1));
    }
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(o.num("timeout-ms", 60_000));
    try (Admin a = admin(o.str("bootstrap"))) {
      try {
        a.createTopics(List.of(new NewTopic(topic, parts, rf).configs(cfg))).all().get();
      } catch (ExecutionException e) {
        if (!(e.getCause() instanceof TopicExistsException)) throw e;
        System.err.println("admin-create-topic: " + topic + " already exists");
        return 1;
      }
      // Wait until every partition has a leader and a full ISR.
      String last = "";
      while (System.nanoTime() < deadline) {
        try {
          TopicDescription d = a.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
          boolean ok = d.partitions().size() == parts;
          for (TopicPartitionInfo p : d.partitions()) {
            ok &= p.leader() != null && p.isr().size() == rf && p.replicas().size() == rf;
          }
          if (ok) {
            System.out.printf("created topic %s id=%s partitions=%d rf=%d configs=%s%n", topic,
                d.topicId(), parts, rf, cfg);
            return 0;
          }
          last = d.toString();
        } catch (ExecutionException e) {
          last = rootCause(e);
        }
        Thread.sleep(100);
      }
      System.err.println("admin-create-topic: partitions not ready in time: " + last);
      return 1;
    }
  }

  // --------------------------------------------------------------------------- record generator

  static byte[] key(long i) { return ("key-" + i).getBytes(StandardCharsets.UTF_8); }

  static byte[] value(long seed, long i, int size) {
    byte[] v = new byte[size];
    new SplittableRandom(seed * 0x9E3779B97F4A7C15L + i).nextBytes(v);
    if (size >= 8) ByteBuffer.wrap(v).putLong(0, i); // the index, readable in a hex dump
    return v;
  }

  static long crc(byte[] v) {
    CRC32C c = new CRC32C();
    c.update(v);
    return c.getValue();
  }

  static byte[] longBytes(long x) { return ByteBuffer.allocate(8).putLong(x).array(); }

  static void digest(MessageDigest md, byte[] k, byte[] v) {
    md.update(longBytes(k.length));
    md.update(k);
    md.update(longBytes(v.length));
    md.update(v);
  }

  /**
   * The topic's partition count. Up to 30 s (the producer's own patience is 60 s): admin()'s 5 s
   * API timeout made a producer that started with four other JVMs on a loaded machine fail with
   * "Timed out waiting for a node assignment" before it had sent anything.
   */
  static int partitionCount(Properties common, String topic) throws Exception {
    try (Admin a = admin(common.getProperty(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG))) {
      return a.describeTopics(List.of(topic), new DescribeTopicsOptions().timeoutMs(30000))
          .allTopicNames().get().get(topic).partitions().size();
    }
  }

  // ------------------------------------------------------------------------------------ produce

  static int produce(Opts o) throws Exception {
    String topic = o.str("topic");
    long n = o.num("count");
    long seed = o.num("seed", 1);
    int size = (int) o.num("size", 100);
    Properties p = common(o);
    int parts = partitionCount(p, topic);
    p.put(ProducerConfig.ACKS_CONFIG, o.str("acks", "all"));
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, o.str("idempotent", "true"));
    p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, o.str("compression", "none"));
    p.put(ProducerConfig.LINGER_MS_CONFIG, o.str("linger-ms", "5"));
    p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
    p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    MessageDigest md = MessageDigest.getInstance("SHA-256");
    AtomicLong acked = new AtomicLong();
    AtomicReference<Exception> err = new AtomicReference<>();
    long t0 = System.nanoTime();
    String txnId = o.str("transactional-id", "");
    long txnRecords = Math.max(1, o.num("txn-records", 50));
    long abortEvery = o.num("abort-every", 0);
    long committed = 0, aborted = 0;
    long openRecords = o.num("open-records", 0);
    String releaseFile = o.str("release-file", "");
    long holdMs = o.num("hold-ms", 300000);
    long rate = o.num("rate", 0);
    if (openRecords > 0 && (txnId.isEmpty() || releaseFile.isEmpty()))
      usage("--open-records needs --transactional-id and --release-file");
    if (!txnId.isEmpty()) {
      p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
      // the open transaction must outlive the hold on the source (broker maximum: 15 min)
      if (openRecords > 0) p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "900000");
    }
    try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p)) {
      if (!txnId.isEmpty()) prod.initTransactions();
      List<byte[][]> txnKv = new ArrayList<>();
      for (long i = 0; i < n && err.get() == null; i++) {
        if (rate > 0) {
          // pacing, not synchronisation: record i is due i/R seconds after the start
          long due = t0 + i * 1_000_000_000L / rate;
          long wait = due - System.nanoTime();
          if (wait > 0) TimeUnit.NANOSECONDS.sleep(wait);
        }
        if (!txnId.isEmpty() && i % txnRecords == 0) prod.beginTransaction();
        byte[] k = key(i);
        byte[] v = value(seed, i, size);
        if (txnId.isEmpty()) digest(md, k, v);
        else txnKv.add(new byte[][] {k, v});
        List<Header> hs = List.of(new RecordHeader("idx", longBytes(i)),
            new RecordHeader("crc", longBytes(crc(v))));
        prod.send(new ProducerRecord<>(topic, (int) (i % parts), null, k, v, hs), (md2, e) -> {
          if (e != null) err.compareAndSet(null, e);
          else acked.incrementAndGet();
        });
        if (!txnId.isEmpty() && (i % txnRecords == txnRecords - 1 || i == n - 1)) {
          long txn = i / txnRecords;
          if (abortEvery > 0 && txn % abortEvery == abortEvery - 1) {
            prod.flush(); // every record of the aborted transaction is in the log
            prod.abortTransaction();
            aborted++;
          } else {
            prod.commitTransaction();
            committed++;
            for (byte[][] kv : txnKv) digest(md, kv[0], kv[1]);
          }
          txnKv.clear();
        }
      }
      prod.flush();
      if (openRecords > 0 && err.get() == null) {
        prod.beginTransaction();
        for (long i = n; i < n + openRecords; i++) {
          byte[] v = value(seed, i, size);
          List<Header> hs = List.of(new RecordHeader("idx", longBytes(i)),
              new RecordHeader("crc", longBytes(crc(v))));
          prod.send(new ProducerRecord<>(topic, (int) (i % parts), null, key(i), v, hs), (md2, e) -> {
            if (e != null) err.compareAndSet(null, e);
            else acked.incrementAndGet();
          });
        }
        prod.flush();
        if (err.get() == null) {
          System.out.printf("open transaction: %d records flushed (keys key-%d..key-%d), neither "
              + "committed nor aborted%n", openRecords, n, n + openRecords - 1);
          System.out.flush();
          long until = System.currentTimeMillis() + holdMs;
          while (!Files.exists(Paths.get(releaseFile))) {
            if (System.currentTimeMillis() > until) {
              err.compareAndSet(null, new IllegalStateException("release file " + releaseFile
                  + " not there after " + holdMs + " ms"));
              break;
            }
            Thread.sleep(50); // poll interval of the release file
          }
          prod.abortTransaction();
          aborted++;
        }
      }
    }
    double secs = (System.nanoTime() - t0) / 1e9;
    if (err.get() != null || acked.get() != n + openRecords) {
      System.err.println("produce: FAILED: acked " + acked.get() + "/" + (n + openRecords)
          + (err.get() != null ? ", first error: " + rootCause(err.get()) : ""));
      return 1;
    }
    System.out.printf("produced %d records to %s (%d partitions) in %.2f s sha256=%s%s%n", n, topic,
        parts, secs, HexFormat.of().formatHex(md.digest()),
        txnId.isEmpty() ? "" : " committed " + committed + " aborted " + aborted + " transactions");
    return 0;
  }

  // ------------------------------------------------------------------------------ consume-verify

  static long headerLong(ConsumerRecord<byte[], byte[]> r, String name) {
    Header h = r.headers().lastHeader(name);
    if (h == null || h.value() == null || h.value().length != 8) return Long.MIN_VALUE;
    return ByteBuffer.wrap(h.value()).getLong();
  }

  static int consumeVerify(Opts o) throws Exception {
    String topic = o.str("topic");
    long n = o.num("count");
    long seed = o.num("seed", 1);
    int size = (int) o.num("size", 100);
    String expectSha = o.str("expect-sha256", "");
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(o.num("timeout-ms", 60_000));
    Properties p = common(o);
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
    List<String> errors = new ArrayList<>();
    byte[][] keys = new byte[(int) n][];
    byte[][] vals = new byte[(int) n][];
    long got = 0;
    long t0 = System.nanoTime();
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      List<TopicPartition> tps = new ArrayList<>();
      for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(30))) {
        tps.add(new TopicPartition(topic, pi.partition()));
      }
      int parts = tps.size();
      c.assign(tps);
      c.seekToBeginning(tps);
      Map<Integer, Long> nextIdx = new HashMap<>();
      Map<Integer, Long> nextOff = new HashMap<>();
      for (TopicPartition tp : tps) {
        nextIdx.put(tp.partition(), (long) tp.partition());
        nextOff.put(tp.partition(), 0L);
      }
      while (got < n && System.nanoTime() < deadline && errors.size() < 20) {
        ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(500));
        for (ConsumerRecord<byte[], byte[]> r : rs) {
          int part = r.partition();
          long idx = headerLong(r, "idx");
          long exp = nextIdx.get(part);
          if (r.offset() != nextOff.get(part)) {
            errors.add("p" + part + ": offset " + r.offset() + " expected " + nextOff.get(part));
          }
          nextOff.put(part, r.offset() + 1);
          if (idx != exp) {
            errors.add("p" + part + "@" + r.offset() + ": record idx " + idx + " expected " + exp
                + " (order or loss)");
          }
          nextIdx.put(part, (idx == Long.MIN_VALUE ? exp : idx) + parts);
          if (idx < 0 || idx >= n) {
            errors.add("p" + part + "@" + r.offset() + ": idx " + idx + " out of range");
            continue;
          }
          byte[] k = key(idx);
          byte[] v = value(seed, idx, size);
          if (!Arrays.equals(k, r.key())) errors.add("idx " + idx + ": key differs");
          if (!Arrays.equals(v, r.value())) errors.add("idx " + idx + ": value differs");
          if (r.value() == null || headerLong(r, "crc") != crc(r.value())) {
            errors.add("idx " + idx + ": crc header does not match value");
          }
          if (keys[(int) idx] != null) errors.add("idx " + idx + ": duplicate");
          keys[(int) idx] = r.key();
          vals[(int) idx] = r.value();
          got++;
        }
      }
      // Nothing beyond what was expected: the end offsets must equal what we consumed.
      Map<TopicPartition, Long> end = c.endOffsets(tps);
      long total = 0;
      for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
        total += e.getValue();
        long pos = c.position(e.getKey());
        if (pos != e.getValue()) {
          errors.add(e.getKey() + ": consumed up to " + pos + " but end offset is " + e.getValue());
        }
      }
      if (total != n) errors.add("topic holds " + total + " records, expected " + n);
    }
    MessageDigest md = MessageDigest.getInstance("SHA-256");
    for (int i = 0; i < n; i++) {
      if (keys[i] == null) {
        if (errors.size() < 40) errors.add("idx " + i + ": missing");
        continue;
      }
      digest(md, keys[i], vals[i]);
    }
    String sha = HexFormat.of().formatHex(md.digest());
    if (!expectSha.isEmpty() && !expectSha.equals(sha)) {
      errors.add("sha256 " + sha + " differs from the producer's " + expectSha);
    }
    double secs = (System.nanoTime() - t0) / 1e9;
    if (got != n) errors.add("consumed " + got + " records, expected " + n);
    if (!errors.isEmpty()) {
      for (String e : errors.subList(0, Math.min(errors.size(), 50))) System.err.println("consume-verify: " + e);
      System.err.println("consume-verify: FAILED (" + errors.size() + " problems)");
      return 1;
    }
    System.out.printf("consumed and verified %d records from %s in %.2f s sha256=%s%n", got, topic,
        secs, sha);
    return 0;
  }

  // ------------------------------------------------------------------------------- consume-group

  /** Every assigned partition's position is at its log end offset (none assigned: false). */
  static boolean atEnd(KafkaConsumer<byte[], byte[]> c) {
    if (c.assignment().isEmpty()) return false;
    Map<TopicPartition, Long> end = c.endOffsets(c.assignment());
    for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
      if (c.position(e.getKey()) < e.getValue()) return false;
    }
    return true;
  }

  static int consumeGroup(Opts o) throws Exception {
    String topic = o.str("topic");
    int sessions = (int) o.num("sessions", 1);
    long perSession = o.num("duration-ms") / Math.max(1, sessions);
    Properties p = common(o);
    p.put(ConsumerConfig.GROUP_ID_CONFIG, o.str("group"));
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
    List<String> errors = new ArrayList<>();
    Map<Integer, Long> last = new HashMap<>();
    long total = 0;
    int maxEpoch = -1;
    String committed = "";
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(o.num("timeout-ms", 90_000));
    long minRecords = o.num("min-records", 0);
    String recordsOut = o.str("records-out", "");
    java.io.PrintWriter out = recordsOut.isEmpty() ? null
        : new java.io.PrintWriter(Files.newBufferedWriter(Paths.get(recordsOut), StandardCharsets.UTF_8));
    for (int s = 1; s <= sessions; s++) {
      long n = 0;
      int sessMax = -1;
      long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(perSession);
      try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
        c.subscribe(List.of(topic));
        while (errors.size() < 20) {
          long now = System.nanoTime();
          if (now >= deadline) {
            errors.add("session " + s + ": not done within --timeout-ms (" + n + " records)");
            break;
          }
          if (now >= end && n > 0 && (s < sessions || (total + n >= minRecords && atEnd(c)))) break;
          ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(200));
          if (rs.isEmpty()) continue;
          for (ConsumerRecord<byte[], byte[]> r : rs) {
            Long prev = last.get(r.partition());
            if (prev != null && r.offset() <= prev) {
              errors.add("p" + r.partition() + ": offset " + r.offset() + " after " + prev
                  + " (read twice or going back)");
            }
            last.put(r.partition(), r.offset());
            sessMax = Math.max(sessMax, r.leaderEpoch().orElse(-1));
            if (out != null) {
              out.printf("%d %d %d %s%n", r.partition(), r.offset(), r.leaderEpoch().orElse(-1),
                  r.value() == null ? "" : new String(r.value(), StandardCharsets.UTF_8));
            }
            n++;
          }
          c.commitSync();
        }
        List<TopicPartition> tps = new ArrayList<>();
        for (PartitionInfo pi : c.partitionsFor(topic)) tps.add(new TopicPartition(topic, pi.partition()));
        StringBuilder sb = new StringBuilder();
        Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> cm =
            c.committed(new java.util.HashSet<>(tps));
        tps.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
        for (TopicPartition tp : tps) {
          org.apache.kafka.clients.consumer.OffsetAndMetadata om = cm.get(tp);
          if (sb.length() > 0) sb.append(',');
          sb.append(tp.partition()).append('=');
          sb.append(om == null ? "none" : om.offset() + "@" + om.leaderEpoch().orElse(-1));
        }
        committed = sb.toString();
      }
      System.out.printf("consume-group: session %d: %d records, max record leader epoch %d, committed %s%n",
          s, n, sessMax, committed);
      total += n;
      maxEpoch = Math.max(maxEpoch, sessMax);
    }
    if (out != null) out.close();
    if (!errors.isEmpty()) {
      for (String e : errors) System.err.println("consume-group: " + e);
      System.err.println("consume-group: FAILED (" + errors.size() + " problems)");
      return 1;
    }
    System.out.printf("consume-group: %d records in %d sessions, max record leader epoch %d, committed %s%n",
        total, sessions, maxEpoch, committed);
    return 0;
  }
}
