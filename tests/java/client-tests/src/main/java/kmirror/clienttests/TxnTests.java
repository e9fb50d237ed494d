package kmirror.clienttests;

import static kmirror.clienttests.Check.expect;
import static kmirror.clienttests.Check.expectEq;
import static kmirror.clienttests.ProduceConsumeTests.b;
import static kmirror.clienttests.ProduceConsumeTests.s;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;

/** Transactional producer: commits and aborts interleaved over 2 partitions, LSO, fencing. */
final class TxnTests {
    private final Main m;
    private final Check c;
    private static final int NTXN = 9;
    private static final int PER_TXN = 6; // alternating partitions 0 and 1

    TxnTests(Main m, Check c) {
        this.m = m;
        this.c = c;
    }

    static boolean committed(int k) {
        return k % 3 != 1; // transactions 1, 4, 7 are aborted
    }

    void run() {
        String topic = Main.unique("kc-java-txn");
        String txnId = Main.unique("kc-java-txn-id");
        boolean ok = c.test("transactional producer: " + NTXN + " transactions over 2 partitions, 3 aborted",
                () -> produceTxns(topic, txnId));
        if (ok) {
            c.test("read_committed consumer: only committed records, in order; offsets skip markers",
                    () -> readCommitted(topic));
            c.test("read_uncommitted consumer: every data record (aborted too), one marker offset per transaction",
                    () -> readUncommitted(topic));
            c.test("describeTransactions/listTransactions: CompleteCommit, the producer id, no partitions",
                    () -> describeTxn(txnId));
        } else {
            for (String n : List.of("read_committed", "read_uncommitted", "describeTransactions"))
                c.notRun(n, "the transactional producer failed");
        }
        c.test("open transaction holds the last stable offset back; commit releases it", this::openTxnLso);
        c.test("a second producer with the same transactional.id fences the first and aborts its transaction",
                this::fencing);
    }

    private Properties txnProps(String txnId) {
        Properties p = m.producerProps("kc-java-txn");
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 30000);
        return p;
    }

    void produceTxns(String topic, String txnId) throws Exception {
        m.createTopic(topic, 2, null);
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(txnProps(txnId))) {
            p.initTransactions();
            for (int k = 0; k < NTXN; k++) {
                p.beginTransaction();
                for (int j = 0; j < PER_TXN; j++)
                    p.send(new ProducerRecord<>(topic, j % 2, b("t" + k), b("t" + k + "-r" + j)));
                if (committed(k)) {
                    p.commitTransaction();
                } else {
                    p.flush(); // the aborted records really reach the log
                    p.abortTransaction();
                }
            }
        }
    }

    private List<ConsumerRecord<byte[], byte[]>> readAll(String topic, IsolationLevel iso) {
        Properties cp = m.consumerProps("kc-java-" + iso.toString().toLowerCase(), null);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, iso.toString().toLowerCase());
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> cons = new KafkaConsumer<>(cp)) {
            List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
            cons.assign(tps);
            cons.seekToBeginning(tps);
            Map<TopicPartition, Long> end = cons.endOffsets(tps);
            for (TopicPartition tp : tps)
                expectEq(end.get(tp), (long) NTXN * (PER_TXN / 2 + 1), iso + " end offset of " + tp);
            Check.pollUntil(() -> {
                cons.poll(Duration.ofMillis(200)).forEach(got::add);
                return tps.stream().allMatch(tp -> cons.position(tp) >= end.get(tp));
            }, 30000, iso + " consumer to reach the end offsets");
        }
        return got;
    }

    void readCommitted(String topic) {
        List<ConsumerRecord<byte[], byte[]>> got = readAll(topic, IsolationLevel.READ_COMMITTED);
        for (int part = 0; part < 2; part++) {
            List<String> want = new ArrayList<>();
            List<Long> wantOffsets = new ArrayList<>();
            for (int k = 0; k < NTXN; k++) {
                for (int j = part, n = 0; j < PER_TXN; j += 2, n++) {
                    if (committed(k)) {
                        want.add("t" + k + "-r" + j);
                        wantOffsets.add((long) k * (PER_TXN / 2 + 1) + n);
                    }
                }
            }
            final int p = part;
            expectEq(got.stream().filter(r -> r.partition() == p).map(r -> s(r.value())).toList(), want,
                    "read_committed values of partition " + part);
            expectEq(got.stream().filter(r -> r.partition() == p).map(ConsumerRecord::offset).toList(), wantOffsets,
                    "read_committed offsets of partition " + part);
        }
    }

    void readUncommitted(String topic) {
        List<ConsumerRecord<byte[], byte[]>> got = readAll(topic, IsolationLevel.READ_UNCOMMITTED);
        for (int part = 0; part < 2; part++) {
            List<String> want = new ArrayList<>();
            List<Long> wantOffsets = new ArrayList<>();
            for (int k = 0; k < NTXN; k++) {
                for (int j = part, n = 0; j < PER_TXN; j += 2, n++) {
                    want.add("t" + k + "-r" + j);
                    wantOffsets.add((long) k * (PER_TXN / 2 + 1) + n); // then one offset for the marker
                }
            }
            final int p = part;
            expectEq(got.stream().filter(r -> r.partition() == p).map(r -> s(r.value())).toList(), want,
                    "read_uncommitted values of partition " + part);
            expectEq(got.stream().filter(r -> r.partition() == p).map(ConsumerRecord::offset).toList(), wantOffsets,
                    "read_uncommitted offsets of partition " + part);
        }
    }

    void describeTxn(String txnId) throws Exception {
        TransactionDescription d = m.admin.describeTransactions(List.of(txnId)).description(txnId)
                .get(15, TimeUnit.SECONDS);
        // The last transaction (8) was committed.
        expectEq(d.state(), TransactionState.COMPLETE_COMMIT, "state");
        expect(d.producerId() >= 0, "producer id %d", d.producerId());
        expect(d.topicPartitions().isEmpty(), "partitions of a completed transaction: %s", d.topicPartitions());
        expectEq(d.transactionTimeoutMs(), 30000L, "transaction timeout");
        Collection<TransactionListing> all = m.admin.listTransactions().all().get(15, TimeUnit.SECONDS);
        TransactionListing l = all.stream().filter(x -> x.transactionalId().equals(txnId)).findFirst().orElse(null);
        expect(l != null, "%s missing from listTransactions", txnId);
        expectEq(l.producerId(), d.producerId(), "listed producer id");
        expectEq(l.state(), TransactionState.COMPLETE_COMMIT, "listed state");
    }

    private long offsetOf(TopicPartition tp, OffsetSpec spec, IsolationLevel iso) throws Exception {
        return m.admin.listOffsets(Map.of(tp, spec), new ListOffsetsOptions(iso)).partitionResult(tp)
                .get(15, TimeUnit.SECONDS).offset();
    }

    void openTxnLso() throws Exception {
        String topic = Main.unique("kc-java-lso");
        m.createTopic(topic, 1, null);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(txnProps(Main.unique("kc-java-lso-id")))) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 3; i++) p.send(new ProducerRecord<>(topic, 0, null, b("open-" + i)));
            p.flush();
            expectEq(offsetOf(tp, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED), 3L, "high watermark");
            expectEq(offsetOf(tp, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED), 0L,
                    "last stable offset with the transaction open");
            List<ProducerState> ps = m.admin.describeProducers(List.of(tp)).partitionResult(tp)
                    .get(15, TimeUnit.SECONDS).activeProducers();
            expectEq(ps.size(), 1, "active producers");
            expectEq(ps.get(0).currentTransactionStartOffset().orElse(-1L), 0L, "open transaction's first offset");
            p.commitTransaction();
        }
        // The marker is written after the commit returns: wait for the LSO to pass it.
        Check.waitUntil(() -> {
            try {
                return offsetOf(tp, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED) == 4L;
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }, 15000, "the last stable offset to reach 4 (3 records + commit marker)");
        expectEq(offsetOf(tp, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED), 4L, "high watermark");
    }

    void fencing() throws Exception {
        String topic = Main.unique("kc-java-fence");
        String txnId = Main.unique("kc-java-fence-id");
        m.createTopic(topic, 1, null);
        TopicPartition tp = new TopicPartition(topic, 0);
        KafkaProducer<byte[], byte[]> first = new KafkaProducer<>(txnProps(txnId));
        try {
            first.initTransactions();
            first.beginTransaction();
            first.send(new ProducerRecord<>(topic, 0, null, b("zombie"))).get(30, TimeUnit.SECONDS);
            try (KafkaProducer<byte[], byte[]> second = new KafkaProducer<>(txnProps(txnId))) {
                second.initTransactions(); // bumps the epoch and aborts the first one's transaction
                try {
                    first.commitTransaction();
                    throw new Check.Failure("the fenced producer committed");
                } catch (KafkaException e) {
                    expect(Main.cause(e, ProducerFencedException.class) != null
                            || e.getClass().getSimpleName().equals("InvalidProducerEpochException"),
                            "the fenced producer's commit failed with %s, expected ProducerFencedException", e);
                }
                second.beginTransaction();
                second.send(new ProducerRecord<>(topic, 0, null, b("good")));
                second.commitTransaction();
            }
        } finally {
            first.close(Duration.ofSeconds(5));
        }
        Properties cp = m.consumerProps("kc-java-fence-reader", null);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> cons = new KafkaConsumer<>(cp)) {
            cons.assign(List.of(tp));
            cons.seekToBeginning(List.of(tp));
            Check.pollUntil(() -> {
                cons.poll(Duration.ofMillis(200)).forEach(r -> got.add(s(r.value())));
                return got.contains("good");
            }, 30000, "the second producer's record");
        }
        expectEq(got, List.of("good"), "read_committed records");
    }
}
