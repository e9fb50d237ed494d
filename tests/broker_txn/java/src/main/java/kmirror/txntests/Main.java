package kmirror.txntests;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Transactional-producer scenarios against a broker, with the Java 4.x client:
 *
 * <pre>
 *   java -jar txn-tests.jar timeout --bootstrap HOST:PORT
 *   java -jar txn-tests.jar fence   --bootstrap HOST:PORT
 *   java -jar txn-tests.jar restart --bootstrap HOST:PORT
 *   java -jar txn-tests.jar failover --bootstrap HOST:PORT[,...] --topic T
 * </pre>
 *
 * <p>failover (a 3-broker cluster; T has 3 partitions with 3 replicas): a consumer group and a
 * transactional producer work, then the scenario prints "KILL <node id of the group
 * coordinator>" and waits for a line on stdin (the driver kills that broker with SIGKILL
 * meanwhile); afterwards the group's committed offsets must be intact, the producer (initialised
 * again if it has to be) commits and aborts transactions, the consumer reads exactly the
 * committed records through the new coordinator and commits, and a read_committed reader sees
 * exactly the committed records.
 *
 * <p>restart prints a line "RESTART" in the middle of two open transactions and waits for a
 * line on stdin (the driver restarts the broker on the same port meanwhile): one transaction
 * is then completed by its producer, the other one, abandoned, must time out on the restarted
 * broker. Every wait polls with a deadline. Prints PASS/FAIL lines and "N passed, N failed";
 * exit 0 only if everything passed.
 */
public final class Main {
    private final String bootstrap;
    private final Admin admin;
    private int passed;
    private int failed;

    private Main(String bootstrap) {
        this.bootstrap = bootstrap;
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 15000);
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        this.admin = Admin.create(ap);
    }

    static final class Failure extends RuntimeException {
        Failure(String msg) {
            super(msg);
        }
    }

    interface Body {
        void run() throws Exception;
    }

    static void expect(boolean cond, String fmt, Object... args) {
        if (!cond) throw new Failure(String.format(fmt, args));
    }

    static void waitUntil(BooleanSupplier cond, long ms, String what) {
        long deadline = System.nanoTime() + ms * 1_000_000L;
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new Failure("timed out after " + ms + " ms waiting for " + what);
            // The condition itself asks the broker (a round trip); this only caps the rate.
            try {
                Thread.sleep(100);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new Failure("interrupted");
            }
        }
    }

    private void test(String name, Body body) {
        long t0 = System.nanoTime();
        try {
            body.run();
            passed++;
            System.out.printf("PASS %s (%.1f s)%n", name, (System.nanoTime() - t0) / 1e9);
        } catch (Throwable t) {
            failed++;
            StringBuilder why = new StringBuilder();
            for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
                if (why.length() > 0) why.append(" <- ");
                why.append(c.getClass().getSimpleName()).append(": ").append(c.getMessage());
            }
            for (StackTraceElement e : t.getStackTrace()) {
                if (e.getClassName().startsWith("kmirror.")) {
                    why.append(" (at ").append(e.getFileName()).append(':').append(e.getLineNumber()).append(')');
                    break;
                }
            }
            System.out.printf("FAIL %s (%.1f s): %s%n", name, (System.nanoTime() - t0) / 1e9, why);
        }
        System.out.flush();
    }

    static String unique(String prefix) {
        return prefix + "-" + System.currentTimeMillis() + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String s(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    KafkaProducer<byte[], byte[]> producer(String txnId, int timeoutMs) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "kb-txn-tests");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, timeoutMs);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 60000);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 120000);
        p.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 500);
        return new KafkaProducer<>(p);
    }

    void createTopic(String name, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1))).all().get(30, TimeUnit.SECONDS);
    }

    long latest(TopicPartition tp, IsolationLevel iso) {
        try {
            return admin.listOffsets(Map.of(tp, OffsetSpec.latest()), new ListOffsetsOptions(iso))
                    .partitionResult(tp).get(15, TimeUnit.SECONDS).offset();
        } catch (Exception e) {
            return -1; // the broker may be restarting: ask again
        }
    }

    /** The data records of @p tps from the start up to the end offsets, in @p iso. */
    List<ConsumerRecord<byte[], byte[]>> readAll(List<TopicPartition> tps, IsolationLevel iso) {
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "kb-txn-tests-" + iso.toString().toLowerCase());
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, iso.toString().toLowerCase());
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (!tps.stream().allMatch(tp -> c.position(tp) >= end.get(tp))) {
                if (System.nanoTime() > deadline) throw new Failure(iso + " consumer did not reach " + end);
                c.poll(Duration.ofMillis(200)).forEach(got::add);
            }
        }
        return got;
    }

    static List<String> values(List<ConsumerRecord<byte[], byte[]>> recs, int partition) {
        return recs.stream().filter(r -> r.partition() == partition).map(r -> s(r.value())).toList();
    }

    static boolean fenced(Throwable e) {
        for (Throwable c = e; c != null; c = c.getCause() == c ? null : c.getCause())
            if (c instanceof ProducerFencedException || c instanceof InvalidProducerEpochException) return true;
        return false;
    }

    ProducerState producerState(TopicPartition tp, long pid) throws Exception {
        return admin.describeProducers(List.of(tp)).partitionResult(tp).get(15, TimeUnit.SECONDS).activeProducers()
                .stream().filter(p -> p.producerId() == pid).findFirst().orElse(null);
    }

    /* ---- scenarios ------------------------------------------------------------------------ */

    void timeout() {
        String topic = unique("kbt-timeout");
        String txnId = unique("kbt-timeout-id");
        TopicPartition tp = new TopicPartition(topic, 0);
        KafkaProducer<byte[], byte[]>[] holder = new KafkaProducer[1];
        test("an open transaction holds the LSO, then is aborted when transaction.timeout.ms (3 s) passes", () -> {
            createTopic(topic, 1);
            KafkaProducer<byte[], byte[]> p = producer(txnId, 3000);
            holder[0] = p;
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 3; i++) p.send(new ProducerRecord<>(topic, 0, null, b("late-" + i)));
            p.flush();
            long t0 = System.nanoTime();
            expect(latest(tp, IsolationLevel.READ_UNCOMMITTED) == 3, "high watermark 3");
            expect(latest(tp, IsolationLevel.READ_COMMITTED) == 0, "LSO 0 while the transaction is open");
            waitUntil(() -> latest(tp, IsolationLevel.READ_COMMITTED) == 4, 30000,
                    "the coordinator to abort the timed-out transaction (LSO 4)");
            long ms = (System.nanoTime() - t0) / 1_000_000;
            expect(ms >= 1500, "aborted after %d ms, before the 3 s timeout", ms);
        });
        test("the timed-out producer is fenced: its commit fails", () -> {
            KafkaProducer<byte[], byte[]> p = holder[0];
            expect(p != null, "no producer");
            try {
                p.commitTransaction();
                throw new Failure("the commit of a timed-out transaction succeeded");
            } catch (KafkaException e) {
                expect(fenced(e), "commit failed with %s, expected ProducerFenced/InvalidProducerEpoch", e);
            } finally {
                p.close(Duration.ofSeconds(5));
            }
        });
        test("after the timeout: read_committed sees nothing, read_uncommitted the 3 records; a new instance commits", () -> {
            expect(values(readAll(List.of(tp), IsolationLevel.READ_COMMITTED), 0).isEmpty(), "read_committed records");
            expect(values(readAll(List.of(tp), IsolationLevel.READ_UNCOMMITTED), 0)
                    .equals(List.of("late-0", "late-1", "late-2")), "read_uncommitted records");
            try (KafkaProducer<byte[], byte[]> p = producer(txnId, 3000)) {
                p.initTransactions();
                p.beginTransaction();
                p.send(new ProducerRecord<>(topic, 0, null, b("after")));
                p.commitTransaction();
            }
            expect(values(readAll(List.of(tp), IsolationLevel.READ_COMMITTED), 0).equals(List.of("after")),
                    "read_committed after the new commit");
        });
    }

    void fence() {
        String topic = unique("kbt-fence");
        String txnId = unique("kbt-fence-id");
        TopicPartition tp0 = new TopicPartition(topic, 0), tp1 = new TopicPartition(topic, 1);
        test("a second producer with the same transactional.id fences the first: its open transaction is aborted, "
                + "its sends and commit fail, the second commits", () -> {
            createTopic(topic, 2);
            KafkaProducer<byte[], byte[]> first = producer(txnId, 60000);
            long pid;
            try {
                first.initTransactions();
                first.beginTransaction();
                first.send(new ProducerRecord<>(topic, 0, null, b("zombie-0"))).get(30, TimeUnit.SECONDS);
                first.send(new ProducerRecord<>(topic, 1, null, b("zombie-1"))).get(30, TimeUnit.SECONDS);
                ProducerState ps = admin.describeProducers(List.of(tp0)).partitionResult(tp0)
                        .get(15, TimeUnit.SECONDS).activeProducers().get(0);
                pid = ps.producerId();
                int epoch = ps.producerEpoch();
                expect(ps.currentTransactionStartOffset().orElse(-1L) == 0L, "open transaction at offset 0");
                try (KafkaProducer<byte[], byte[]> second = producer(txnId, 60000)) {
                    second.initTransactions();
                    // the first one's transaction was aborted with a bumped epoch
                    ProducerState after = producerState(tp1, pid);
                    expect(after != null && after.producerEpoch() == epoch + 1
                                    && after.currentTransactionStartOffset().isEmpty(),
                            "partition 1 after the fence: %s", after);
                    expect(latest(tp0, IsolationLevel.READ_COMMITTED) == 2, "LSO of partition 0 after the abort");
                    try {
                        first.send(new ProducerRecord<>(topic, 0, null, b("zombie-2"))).get(30, TimeUnit.SECONDS);
                        first.commitTransaction();
                        throw new Failure("the fenced producer committed");
                    } catch (Exception e) {
                        expect(fenced(e), "the fenced producer failed with %s", e);
                    }
                    second.beginTransaction();
                    second.send(new ProducerRecord<>(topic, 0, null, b("good-0")));
                    second.send(new ProducerRecord<>(topic, 1, null, b("good-1")));
                    second.commitTransaction();
                }
            } finally {
                first.close(Duration.ofSeconds(5));
            }
            List<ConsumerRecord<byte[], byte[]>> rc = readAll(List.of(tp0, tp1), IsolationLevel.READ_COMMITTED);
            expect(values(rc, 0).equals(List.of("good-0")) && values(rc, 1).equals(List.of("good-1")),
                    "read_committed: %s / %s", values(rc, 0), values(rc, 1));
            ProducerState fin = producerState(tp0, pid);
            expect(fin != null && fin.currentTransactionStartOffset().isEmpty(), "no open transaction left: %s", fin);
        });
    }

    void restart() throws Exception {
        String topic = unique("kbt-restart");
        String commitId = unique("kbt-restart-commit");
        String abandonId = unique("kbt-restart-abandon");
        TopicPartition tp0 = new TopicPartition(topic, 0), tp1 = new TopicPartition(topic, 1);
        List<TopicPartition> tps = List.of(tp0, tp1);
        KafkaProducer<byte[], byte[]> a = producer(commitId, 60000);
        KafkaProducer<byte[], byte[]> z = producer(abandonId, 8000);
        long[] zpid = {-1};
        test("before the restart: two open transactions over 2 partitions", () -> {
            createTopic(topic, 2);
            a.initTransactions();
            z.initTransactions();
            a.beginTransaction();
            z.beginTransaction();
            a.send(new ProducerRecord<>(topic, 0, null, b("a-0")));
            z.send(new ProducerRecord<>(topic, 0, null, b("z-0")));
            a.send(new ProducerRecord<>(topic, 1, null, b("a-1")));
            z.send(new ProducerRecord<>(topic, 1, null, b("z-1")));
            a.flush();
            z.flush();
            expect(latest(tp0, IsolationLevel.READ_COMMITTED) == 0, "LSO held at 0");
            List<ProducerState> open = admin.describeProducers(List.of(tp0)).partitionResult(tp0)
                    .get(15, TimeUnit.SECONDS).activeProducers().stream()
                    .filter(p -> p.currentTransactionStartOffset().isPresent()).toList();
            expect(open.size() == 2, "two open transactions on partition 0: %s", open);
            // the abandoned producer's record: read it back to learn its producer id
            List<ConsumerRecord<byte[], byte[]>> ru = readAll(List.of(tp0), IsolationLevel.READ_UNCOMMITTED);
            long zoff = ru.stream().filter(r -> s(r.value()).equals("z-0")).findFirst().orElseThrow().offset();
            zpid[0] = open.stream().filter(p -> p.currentTransactionStartOffset().getAsLong() == zoff)
                    .findFirst().orElseThrow().producerId();
        });
        System.out.println("RESTART");
        System.out.flush();
        String line = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        expect(line != null, "the driver went away");
        test("after the restart: the state was reloaded, the open transaction completes with a commit", () -> {
            waitUntil(() -> latest(tp0, IsolationLevel.READ_UNCOMMITTED) == 2, 60000, "the restarted broker");
            expect(latest(tp0, IsolationLevel.READ_COMMITTED) == 0, "LSO still held after the restart");
            a.send(new ProducerRecord<>(topic, 0, null, b("a-2")));
            a.send(new ProducerRecord<>(topic, 1, null, b("a-3")));
            a.commitTransaction();
            a.close(Duration.ofSeconds(5));
        });
        test("after the restart: the abandoned transaction times out (8 s) and is aborted", () -> {
            waitUntil(() -> latest(tp0, IsolationLevel.READ_COMMITTED) == latest(tp0, IsolationLevel.READ_UNCOMMITTED)
                            && latest(tp1, IsolationLevel.READ_COMMITTED) == latest(tp1, IsolationLevel.READ_UNCOMMITTED),
                    60000, "the LSO to reach the high watermark");
            ProducerState ps = producerState(tp0, zpid[0]);
            expect(ps != null && ps.currentTransactionStartOffset().isEmpty(), "abandoned producer: %s", ps);
            List<ConsumerRecord<byte[], byte[]>> rc = readAll(tps, IsolationLevel.READ_COMMITTED);
            expect(values(rc, 0).equals(List.of("a-0", "a-2")) && values(rc, 1).equals(List.of("a-1", "a-3")),
                    "read_committed: %s / %s", values(rc, 0), values(rc, 1));
            // the two producers' first records raced each other: compare each producer's order
            List<ConsumerRecord<byte[], byte[]>> ru = readAll(tps, IsolationLevel.READ_UNCOMMITTED);
            List<String> ru0 = values(ru, 0), ru1 = values(ru, 1);
            expect(ru0.size() == 3 && ru1.size() == 3 && ru0.contains("z-0") && ru1.contains("z-1")
                            && ru0.stream().filter(v -> v.startsWith("a-")).toList().equals(List.of("a-0", "a-2"))
                            && ru1.stream().filter(v -> v.startsWith("a-")).toList().equals(List.of("a-1", "a-3")),
                    "read_uncommitted: %s / %s", ru0, ru1);
        });
        test("the abandoned producer is fenced; a new instance of its id commits", () -> {
            try {
                z.commitTransaction();
                throw new Failure("the timed-out transaction committed");
            } catch (KafkaException e) {
                expect(fenced(e), "commit failed with %s", e);
            } finally {
                z.close(Duration.ofSeconds(5));
            }
            try (KafkaProducer<byte[], byte[]> p = producer(abandonId, 8000)) {
                p.initTransactions();
                p.beginTransaction();
                p.send(new ProducerRecord<>(topic, 0, null, b("z-new")));
                p.commitTransaction();
            }
            expect(values(readAll(tps, IsolationLevel.READ_COMMITTED), 0).equals(List.of("a-0", "a-2", "z-new")),
                    "read_committed after the new instance");
        });
    }

    /* ---- failover: the coordinators' broker killed (3-broker cluster) ---------------- */

    KafkaConsumer<byte[], byte[]> groupConsumer(String group) {
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "kb-txn-failover");
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10000);
        cp.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 1000);
        cp.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 500);
        return new KafkaConsumer<>(cp);
    }

    /** One transaction of @p n records "prefix-i" on partition i % 3, committed or aborted.
     *  Retried with a new producer (initTransactions again) while the cluster recovers. */
    KafkaProducer<byte[], byte[]> transaction(KafkaProducer<byte[], byte[]> p, String txnId, String topic,
            String prefix, int n, boolean commit) {
        long deadline = System.nanoTime() + 120_000_000_000L;
        for (;;) {
            try {
                if (p == null) {
                    p = producer(txnId, 60000);
                    p.initTransactions();
                }
                p.beginTransaction();
                for (int i = 0; i < n; i++)
                    p.send(new ProducerRecord<>(topic, i % 3, b("k-" + i), b(prefix + "-" + i)));
                if (commit) p.commitTransaction();
                else p.abortTransaction();
                return p;
            } catch (KafkaException e) {
                System.out.println("transaction " + prefix + ": " + e + " (retrying with a new producer)");
                System.out.flush();
                p.close(Duration.ZERO);
                p = null;
                if (System.nanoTime() > deadline) throw new Failure("transaction " + prefix + " never went through: " + e);
            }
        }
    }

    /** Poll @p c until @p want records were read in all (appending to @p got). */
    static void pollUntil(KafkaConsumer<byte[], byte[]> c, List<ConsumerRecord<byte[], byte[]>> got, int want) {
        long deadline = System.nanoTime() + 120_000_000_000L;
        while (got.size() < want) {
            if (System.nanoTime() > deadline) throw new Failure("the group consumer read " + got.size() + " of " + want);
            c.poll(Duration.ofMillis(200)).forEach(got::add);
        }
    }

    static void commitRetrying(KafkaConsumer<byte[], byte[]> c) {
        long deadline = System.nanoTime() + 120_000_000_000L;
        for (;;) {
            try {
                c.commitSync(Duration.ofSeconds(15));
                return;
            } catch (KafkaException e) {
                if (System.nanoTime() > deadline) throw new Failure("commitSync never succeeded: " + e);
                c.poll(Duration.ofMillis(200)); // rejoin if the group rebalanced
            }
        }
    }

    Map<TopicPartition, Long> committed(String group) throws Exception {
        Map<TopicPartition, Long> out = new HashMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS).entrySet())
            if (e.getValue() != null) out.put(e.getKey(), e.getValue().offset());
        return out;
    }

    static Set<String> expected(String prefix, int n) {
        Set<String> v = new HashSet<>();
        for (int i = 0; i < n; i++) v.add(prefix + "-" + i);
        return v;
    }

    void failover(String topic) {
        String group = unique("kbc-group");
        String txnId = unique("kbc-txn");
        List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1),
                new TopicPartition(topic, 2));
        test("failover of the group and transaction coordinators", () -> {
            KafkaProducer<byte[], byte[]> p = transaction(null, txnId, topic, "a", 30, true);
            List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
            Map<TopicPartition, Long> before = new HashMap<>();
            try (KafkaConsumer<byte[], byte[]> c = groupConsumer(group)) {
                c.subscribe(List.of(topic));
                pollUntil(c, got, 30);
                commitRetrying(c);
                for (TopicPartition tp : tps) before.put(tp, c.position(tp));
                int gco = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                        .get(30, TimeUnit.SECONDS).coordinator().id();
                int tco = admin.describeTransactions(List.of(txnId)).description(txnId).get(30, TimeUnit.SECONDS)
                        .coordinatorId();
                System.out.println("group coordinator " + gco + ", transaction coordinator " + tco);
                System.out.println("KILL " + gco);
                System.out.flush();
                String line = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
                expect(line != null, "no go-ahead from the driver");
                // the group's offsets survived the coordinator (read through the new one)
                waitUntil(() -> {
                    try {
                        return committed(group).equals(before);
                    } catch (Exception e) {
                        return false;
                    }
                }, 60000, "the committed offsets " + before + " through the new coordinator");
                int gco2 = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                        .get(30, TimeUnit.SECONDS).coordinator().id();
                expect(gco2 != gco, "the group coordinator is still %d", gco);
                p = transaction(p, txnId, topic, "b", 30, true);
                p = transaction(p, txnId, topic, "x", 6, false);
                p = transaction(p, txnId, topic, "c", 9, true);
                pollUntil(c, got, 69);
                c.poll(Duration.ofMillis(500)).forEach(got::add); // nothing aborted may follow
                commitRetrying(c);
                Set<String> want = expected("a", 30);
                want.addAll(expected("b", 30));
                want.addAll(expected("c", 9));
                Set<String> seen = new HashSet<>();
                for (ConsumerRecord<byte[], byte[]> r : got) seen.add(s(r.value()));
                expect(got.size() == 69 && seen.equals(want), "the group read %d records: %s", got.size(), seen);
                Map<TopicPartition, Long> pos = new HashMap<>();
                for (TopicPartition tp : tps) pos.put(tp, c.position(tp));
                expect(committed(group).equals(pos), "committed %s, positions %s", committed(group), pos);
            }
            p.close(Duration.ofSeconds(5));
            List<ConsumerRecord<byte[], byte[]>> all = readAll(tps, IsolationLevel.READ_COMMITTED);
            Set<String> vals = new HashSet<>();
            for (ConsumerRecord<byte[], byte[]> r : all) vals.add(s(r.value()));
            Set<String> want = expected("a", 30);
            want.addAll(expected("b", 30));
            want.addAll(expected("c", 9));
            expect(all.size() == 69 && vals.equals(want), "read_committed: %d records %s", all.size(), vals);
        });
    }

    int finish() {
        admin.close(Duration.ofSeconds(5));
        System.out.printf("%d passed, %d failed%n", passed, failed);
        System.out.flush();
        return failed == 0 && passed > 0 ? 0 : 1;
    }

    public static void main(String[] args) throws Exception {
        String cmd = args.length > 0 ? args[0] : "";
        String bootstrap = System.getenv("KM_BOOTSTRAP");
        for (int i = 1; i < args.length; i++)
            if (args[i].equals("--bootstrap") && i + 1 < args.length) bootstrap = args[++i];
        String topic = null;
        for (int i = 1; i < args.length; i++)
            if (args[i].equals("--topic") && i + 1 < args.length) topic = args[++i];
        if (bootstrap == null || !List.of("timeout", "fence", "restart", "failover").contains(cmd)
                || (cmd.equals("failover") && topic == null)) {
            System.err.println("usage: txn-tests timeout|fence|restart --bootstrap HOST:PORT | failover --bootstrap HOST:PORT --topic T");
            System.exit(64);
        }
        Main m = new Main(bootstrap);
        switch (cmd) {
            case "timeout" -> m.timeout();
            case "fence" -> m.fence();
            case "failover" -> m.failover(topic);
            default -> m.restart();
        }
        // halt: producers left open on purpose must not abort their transactions at close
        Runtime.getRuntime().halt(m.finish());
    }
}
