package kmirror.robusttools;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.FileWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java side of tests/robust/crash_recovery.sh.
 *
 * <pre>
 * create-topic --bootstrap B --topic T --partitions P [--config k=v]... [--timeout-ms T]
 * produce      --bootstrap B --topic T --count N --ack-log FILE [--first-id I] [--partitions P]
 *              [--rate R] [--size BYTES] [--acks all|1] [--compression C] [--linger-ms L]
 *              [--delivery-timeout-ms D] [--request-timeout-ms T] [--gate-file F]
 * verify       --bootstrap B --topic T --ack-log FILE [--ack-log FILE]... [--size BYTES]
 *              [--cut P:OFF]... [--timeout-ms T]
 * end-offsets  --bootstrap B --topic T [--timeout-ms T]
 * </pre>
 *
 * Record id i goes to partition i % P with key "r&lt;i&gt;" and a value of SIZE bytes that
 * depends on i only ("v&lt;i&gt;:" followed by bytes from a generator seeded with i), so any
 * record can be checked on its own. produce uses an idempotent producer (acks=all by default,
 * retrying for as long as --delivery-timeout-ms) and appends one line per completed send to the
 * ack log: "A id partition offset" when acknowledged, "E id exception message" when it failed.
 * The log is flushed every 50 ms so that a test driver can follow the progress. With --gate-file
 * the producer sends the i-th record of this run only once the number in F is greater than i
 * (F is re-read every 20 ms while it waits; an unreadable F keeps the last value; a driver
 * replaces it with rename(2)): tests/cluster/scenarios.sh uses it so that its kills always fall
 * while records are in flight and the producer cannot finish before the last kill.
 *
 * verify reads every partition from its log start to its end offset and checks: offsets
 * contiguous (no gap), every record well formed (key, value), per partition ids strictly
 * increasing in offset order (nothing reordered or duplicated), no id twice in the topic, and
 * every acknowledged record present at its acknowledged partition and offset with its id.
 * --cut P:OFF says that the test cut partition P at offset OFF: acknowledgements from ack logs
 * other than the last one at offsets >= OFF are expected to be gone (and must not be present).
 *
 * Exit status: 0 ok, 1 verification failure or failed sends, 2 error, 64 usage.
 */
public final class Main {
  private Main() {}

  public static void main(String[] argv) throws Exception {
    if (argv.length < 1) usage("missing subcommand");
    Opts o = new Opts(Arrays.copyOfRange(argv, 1, argv.length));
    int rc;
    switch (argv[0]) {
      case "create-topic": rc = createTopic(o); break;
      case "produce": rc = produce(o); break;
      case "verify": rc = verify(o); break;
      case "end-offsets": rc = endOffsets(o); break;
      default: usage("unknown subcommand " + argv[0]); rc = 64;
    }
    System.out.flush();
    System.exit(rc);
  }

  // ------------------------------------------------------------------ options

  static final class Opts {
    final Map<String, List<String>> m = new HashMap<>();

    Opts(String[] a) {
      for (int i = 0; i < a.length; i++) {
        if (!a[i].startsWith("--") || i + 1 >= a.length) usage("bad argument " + a[i]);
        m.computeIfAbsent(a[i].substring(2), k -> new ArrayList<>()).add(a[++i]);
      }
    }

    String str(String k, String def) {
      List<String> v = m.get(k);
      if (v == null) {
        if (def == null) usage("--" + k + " is required");
        return def;
      }
      return v.get(v.size() - 1);
    }

    long num(String k, long def) {
      return Long.parseLong(str(k, Long.toString(def)));
    }

    List<String> all(String k) {
      return m.getOrDefault(k, List.of());
    }
  }

  static void usage(String why) {
    System.err.println("robust-tools: " + why);
    System.err.println("usage: create-topic | produce | verify | end-offsets (see Main.java)");
    System.exit(64);
  }

  static void log(String fmt, Object... args) {
    System.err.println("robust-tools: " + String.format(fmt, args));
  }

  // ------------------------------------------------------------------ records

  static byte[] key(long id) {
    return ("r" + id).getBytes(StandardCharsets.US_ASCII);
  }

  static byte[] value(long id, int size) {
    byte[] head = ("v" + id + ":").getBytes(StandardCharsets.US_ASCII);
    byte[] v = new byte[Math.max(size, head.length)];
    System.arraycopy(head, 0, v, 0, head.length);
    SplittableRandom r = new SplittableRandom(id * 0x9e3779b97f4a7c15L + 12345);
    for (int i = head.length; i < v.length; i++) v[i] = (byte) ('a' + r.nextInt(26));
    return v;
  }

  /** The id encoded in a key "r<id>", or -1. */
  static long idOf(byte[] key) {
    if (key == null || key.length < 2 || key[0] != 'r') return -1;
    long id = 0;
    for (int i = 1; i < key.length; i++) {
      if (key[i] < '0' || key[i] > '9' || i > 19) return -1;
      id = id * 10 + (key[i] - '0');
    }
    return id;
  }

  // ------------------------------------------------------------------ clients

  static Properties common(Opts o) {
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, o.str("bootstrap", null));
    p.put(AdminClientConfig.RECONNECT_BACKOFF_MS_CONFIG, "50");
    p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
    return p;
  }

  static int createTopic(Opts o) throws Exception {
    String topic = o.str("topic", null);
    int parts = (int) o.num("partitions", 1);
    long deadline = System.currentTimeMillis() + o.num("timeout-ms", 60000);
    Map<String, String> cfg = new HashMap<>();
    for (String kv : o.all("config")) {
      int eq = kv.indexOf('=');
      if (eq <= 0) usage("bad --config " + kv);
      cfg.put(kv.substring(0, eq), kv.substring(eq + 1));
    }
    try (Admin admin = Admin.create(common(o))) {
      try {
        admin.createTopics(List.of(new NewTopic(topic, parts, (short) 1).configs(cfg)))
            .all().get(30, TimeUnit.SECONDS);
      } catch (ExecutionException e) {
        if (!(e.getCause() instanceof TopicExistsException)) throw e;
        log("topic %s exists already", topic);
      }
      // Wait until every partition has a leader.
      for (;;) {
        try {
          TopicDescription d =
              admin.describeTopics(List.of(topic)).allTopicNames().get(10, TimeUnit.SECONDS)
                  .get(topic);
          boolean ok = d.partitions().size() == parts;
          for (TopicPartitionInfo p : d.partitions()) ok &= p.leader() != null;
          if (ok) break;
        } catch (ExecutionException e) {
          // not known yet: retry
        }
        if (System.currentTimeMillis() > deadline) {
          log("topic %s has no leader for every partition in time", topic);
          return 2;
        }
        Thread.sleep(100); // poll interval of a deadline-bounded wait
      }
    }
    System.out.println("created " + topic + " partitions=" + parts);
    return 0;
  }

  static int produce(Opts o) throws Exception {
    String topic = o.str("topic", null);
    long count = o.num("count", -1);
    long first = o.num("first-id", 0);
    int parts = (int) o.num("partitions", 1);
    double rate = Double.parseDouble(o.str("rate", "0"));
    int size = (int) o.num("size", 100);
    if (count < 0) usage("--count is required");

    Properties p = common(o);
    p.put(ProducerConfig.ACKS_CONFIG, o.str("acks", "all"));
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
    p.put(ProducerConfig.RETRIES_CONFIG, Integer.toString(Integer.MAX_VALUE));
    p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, o.str("delivery-timeout-ms", "600000"));
    // Longer than any restart: a request that times out in flight makes the idempotent producer
    // bump its epoch and resend with new sequence numbers (KIP-360), which the broker cannot
    // tell from new data, so a write that did land before the crash would be duplicated.
    p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, o.str("request-timeout-ms", "120000"));
    p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "600000");
    p.put(ProducerConfig.LINGER_MS_CONFIG, o.str("linger-ms", "5"));
    p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, o.str("compression", "none"));
    p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "50");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

    AtomicLong acked = new AtomicLong(), failed = new AtomicLong();
    final BufferedWriter ack = new BufferedWriter(new FileWriter(o.str("ack-log", null), true));
    Thread flusher = new Thread(() -> {
      while (!Thread.currentThread().isInterrupted()) {
        synchronized (ack) {
          try {
            ack.flush();
          } catch (IOException e) {
            return;
          }
        }
        LockSupport.parkNanos(50_000_000L); // flush cadence for the driver that tails the log
      }
    });
    flusher.setDaemon(true);
    flusher.start();
    long t0 = System.nanoTime(), due = t0;
    long gap = rate > 0 ? (long) (1e9 / rate) : 0;
    String gateFile = o.str("gate-file", "");
    long gate = gateFile.isEmpty() ? Long.MAX_VALUE : readGate(gateFile, 0);
    try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p)) {
      for (long i = 0; i < count; i++) {
        final long id = first + i;
        while (i >= gate) {
          LockSupport.parkNanos(20_000_000L); // poll cadence of the driver's gate file
          gate = readGate(gateFile, gate);
          due = System.nanoTime();
        }
        if (gap > 0) {
          // pacing: at most `rate` sends per second, and no burst to catch up after the send
          // blocked (the broker was down), so that progress keeps meaning time
          long now = System.nanoTime();
          due = Math.max(due + gap, now - 50_000_000L);
          while ((now = System.nanoTime()) < due) LockSupport.parkNanos(due - now);
        }
        prod.send(new ProducerRecord<>(topic, (int) (id % parts), key(id), value(id, size)),
            (md, ex) -> {
              synchronized (ack) {
                try {
                  if (ex == null) {
                    ack.write("A " + id + " " + md.partition() + " " + md.offset() + "\n");
                    acked.incrementAndGet();
                  } else {
                    String msg = String.valueOf(ex.getMessage()).replace('\n', ' ');
                    ack.write("E " + id + " " + ex.getClass().getSimpleName() + " " + msg + "\n");
                    failed.incrementAndGet();
                  }
                } catch (IOException e) {
                  throw new RuntimeException(e);
                }
              }
            });
      }
      prod.flush();
    }
    flusher.interrupt();
    synchronized (ack) {
      ack.close();
    }
    double secs = (System.nanoTime() - t0) / 1e9;
    System.out.printf("produced ids %d..%d: acked=%d failed=%d in %.1f s%n", first,
        first + count - 1, acked.get(), failed.get(), secs);
    return failed.get() == 0 && acked.get() == count ? 0 : 1;
  }

  /** The number in the gate file, or @p prev when it cannot be read. */
  static long readGate(String path, long prev) {
    try {
      return Long.parseLong(Files.readString(Paths.get(path)).trim());
    } catch (IOException | NumberFormatException e) {
      return prev;
    }
  }

  static KafkaConsumer<byte[], byte[]> consumer(Opts o) {
    Properties p = common(o);
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
    p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
    p.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
    return new KafkaConsumer<>(p);
  }

  static List<TopicPartition> partitions(KafkaConsumer<?, ?> c, String topic, long deadline)
      throws InterruptedException {
    for (;;) {
      List<PartitionInfo> infos = c.partitionsFor(topic, Duration.ofSeconds(10));
      if (infos != null && !infos.isEmpty()) {
        List<TopicPartition> tps = new ArrayList<>();
        for (PartitionInfo pi : infos) tps.add(new TopicPartition(topic, pi.partition()));
        tps.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
        return tps;
      }
      if (System.currentTimeMillis() > deadline) throw new IllegalStateException("no partitions");
      Thread.sleep(100); // poll interval of a deadline-bounded wait
    }
  }

  static int endOffsets(Opts o) throws Exception {
    String topic = o.str("topic", null);
    long deadline = System.currentTimeMillis() + o.num("timeout-ms", 60000);
    try (KafkaConsumer<byte[], byte[]> c = consumer(o)) {
      List<TopicPartition> tps = partitions(c, topic, deadline);
      Map<TopicPartition, Long> b = c.beginningOffsets(tps, Duration.ofSeconds(30));
      Map<TopicPartition, Long> e = c.endOffsets(tps, Duration.ofSeconds(30));
      for (TopicPartition tp : tps)
        System.out.println(tp.partition() + " " + b.get(tp) + " " + e.get(tp));
    }
    return 0;
  }

  /** One acknowledged send. */
  record Ack(long id, int partition, long offset, int log) {}

  static int verify(Opts o) throws Exception {
    String topic = o.str("topic", null);
    int size = (int) o.num("size", 100);
    long deadline = System.currentTimeMillis() + o.num("timeout-ms", 180000);
    List<String> logs = o.all("ack-log");
    if (logs.isEmpty()) usage("--ack-log is required");
    Map<Integer, Long> cut = new HashMap<>();
    for (String s : o.all("cut")) {
      String[] pa = s.split(":");
      cut.put(Integer.parseInt(pa[0]), Long.parseLong(pa[1]));
    }

    // acknowledgements, in log order; a later log wins for the same partition and offset
    List<Ack> acks = new ArrayList<>();
    long sendErrors = 0;
    for (int li = 0; li < logs.size(); li++) {
      try (BufferedReader r = Files.newBufferedReader(Paths.get(logs.get(li)))) {
        String line;
        while ((line = r.readLine()) != null) {
          String[] f = line.split(" ", 4);
          if (f[0].equals("A") && f.length == 4)
            acks.add(new Ack(Long.parseLong(f[1]), Integer.parseInt(f[2]), Long.parseLong(f[3]), li));
          else if (f[0].equals("E"))
            sendErrors++;
        }
      }
    }

    List<String> fails = new ArrayList<>();
    long nfail = 0;
    Map<Integer, long[]> idsAt = new HashMap<>(); // partition -> id at (offset - start)
    Map<Integer, Long> starts = new HashMap<>();
    Map<Long, String> seen = new HashMap<>(); // id -> "partition/offset" of its first copy
    long records = 0, gaps = 0, reordered = 0, dups = 0, malformed = 0;

    try (KafkaConsumer<byte[], byte[]> c = consumer(o)) {
      List<TopicPartition> tps = partitions(c, topic, deadline);
      Map<TopicPartition, Long> begin = c.beginningOffsets(tps, Duration.ofSeconds(30));
      Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
      c.assign(tps);
      c.seekToBeginning(tps);
      Map<Integer, Long> next = new HashMap<>(), lastId = new HashMap<>();
      for (TopicPartition tp : tps) {
        long b = begin.get(tp), e = end.get(tp);
        starts.put(tp.partition(), b);
        long[] arr = new long[(int) (e - b)];
        Arrays.fill(arr, -1);
        idsAt.put(tp.partition(), arr);
        next.put(tp.partition(), b);
        lastId.put(tp.partition(), -1L);
      }
      for (;;) {
        boolean done = true;
        for (TopicPartition tp : tps) done &= c.position(tp) >= end.get(tp);
        if (done) break;
        if (System.currentTimeMillis() > deadline) {
          fails.add("consumer did not reach the end offsets in time");
          nfail++;
          break;
        }
        for (ConsumerRecord<byte[], byte[]> rec : c.poll(Duration.ofMillis(500))) {
          int p = rec.partition();
          long exp = next.get(p);
          long[] arr = idsAt.get(p);
          long start = starts.get(p);
          if (rec.offset() >= start + arr.length) continue; // appended after the end offsets
          records++;
          if (rec.offset() != exp) {
            gaps++;
            if (nfail++ < 20) fails.add(String.format("partition %d: offset gap %d..%d", p, exp, rec.offset() - 1));
          }
          next.put(p, rec.offset() + 1);
          long id = idOf(rec.key());
          if (id < 0 || !Arrays.equals(rec.value(), value(id, size))) {
            malformed++;
            if (nfail++ < 20) fails.add(String.format("partition %d offset %d: key/value not a record of this test", p, rec.offset()));
            continue;
          }
          arr[(int) (rec.offset() - start)] = id;
          if (id <= lastId.get(p)) {
            reordered++;
            if (nfail++ < 20) fails.add(String.format("partition %d offset %d: id %d after id %d (reordered or duplicated)", p, rec.offset(), id, lastId.get(p)));
          }
          lastId.put(p, id);
          String where = p + "/" + rec.offset();
          String prev = seen.putIfAbsent(id, where);
          if (prev != null) {
            dups++;
            if (nfail++ < 20) fails.add(String.format("id %d appears twice: partition/offset %s and %s", id, prev, where));
          }
        }
      }
    }

    long ackChecked = 0, ackMissing = 0, ackCutOk = 0, ackCutPresent = 0;
    int lastLog = logs.size() - 1;
    Set<Long> ackedIds = new HashSet<>();
    for (Ack a : acks) {
      long[] arr = idsAt.get(a.partition());
      Long start = starts.get(a.partition());
      long at = -1;
      if (arr != null && a.offset() >= start && a.offset() - start < arr.length)
        at = arr[(int) (a.offset() - start)];
      Long c = cut.get(a.partition());
      if (c != null && a.log() != lastLog && a.offset() >= c) {
        if (at == a.id()) {
          ackCutPresent++;
          if (nfail++ < 20) fails.add(String.format("id %d at partition %d offset %d is past the cut at %d but still there", a.id(), a.partition(), a.offset(), c));
        } else {
          ackCutOk++;
        }
        continue;
      }
      ackedIds.add(a.id());
      ackChecked++;
      if (at != a.id()) {
        ackMissing++;
        if (nfail++ < 20)
          fails.add(String.format("acknowledged id %d missing at partition %d offset %d (found %s)", a.id(), a.partition(), a.offset(), at < 0 ? "nothing" : "id " + at));
      }
    }
    long unacked = 0;
    for (long id : seen.keySet()) if (!ackedIds.contains(id)) unacked++;

    for (String f : fails) System.out.println("FAIL " + f);
    System.out.printf(
        "verify %s: %d records read (%d partitions), %d acknowledged checked, %d missing or moved, "
            + "%d acknowledged past a cut (gone as expected: %d), %d present but never acknowledged, "
            + "gaps %d, reordered %d, duplicates %d, malformed %d, failed sends %d%n",
        topic, records, idsAt.size(), ackChecked, ackMissing, ackCutOk + ackCutPresent, ackCutOk,
        unacked, gaps, reordered, dups, malformed, sendErrors);
    System.out.println(nfail == 0 ? "verify: OK" : "verify: FAILED (" + nfail + " problem(s))");
    return nfail == 0 ? 0 : 1;
  }
}
