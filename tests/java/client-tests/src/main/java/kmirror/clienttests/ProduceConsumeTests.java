package kmirror.clienttests;

import static kmirror.clienttests.Check.expect;
import static kmirror.clienttests.Check.expectEq;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.TimestampType;

/** Idempotent producer (the 4.x default) and a consumer reading everything back. */
final class ProduceConsumeTests {
    private final Main m;
    private final Check c;
    private static final int N = 300;
    private static final int PARTS = 3;

    ProduceConsumeTests(Main m, Check c) {
        this.m = m;
        this.c = c;
    }

    void run() {
        for (String codec : List.of("none", "zstd")) {
            String topic = Main.unique("kc-java-idem-" + codec);
            boolean ok = c.test("idempotent producer (defaults), compression " + codec
                    + ": per-partition offsets 0..n-1, consumer reads content/headers/timestamps in order",
                    () -> produceConsume(topic, codec));
            if (codec.equals("none")) {
                if (ok) {
                    c.test("describeProducers: one idempotent producer per partition, last sequence = count-1",
                            () -> describeProducers(topic));
                } else {
                    c.notRun("describeProducers", "produce failed");
                }
            }
        }
    }

    static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String s(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    private final Map<String, Map<Integer, Integer>> perPartition = new HashMap<>();

    void produceConsume(String topic, String codec) throws Exception {
        m.createTopic(topic, PARTS, null);
        Properties pp = m.producerProps("kc-java-idem");
        pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        List<Future<RecordMetadata>> futs = new ArrayList<>();
        long t0 = System.currentTimeMillis();
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < N; i++) {
                ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, b("key-" + i),
                        b(("value " + i + " ").repeat(1 + i % 11)));
                r.headers().add("idx", b(Integer.toString(i))).add("codec", b(codec));
                futs.add(p.send(r));
            }
            p.flush();
        }
        long t1 = System.currentTimeMillis();
        Map<TopicPartition, List<long[]>> sent = new HashMap<>(); // offset, index, timestamp
        for (int i = 0; i < N; i++) {
            RecordMetadata md = futs.get(i).get(30, TimeUnit.SECONDS);
            sent.computeIfAbsent(new TopicPartition(topic, md.partition()), k -> new ArrayList<>())
                    .add(new long[] {md.offset(), i, md.timestamp()});
        }
        expect(sent.size() >= 2, "records in %d partition(s) only", sent.size());
        Map<Integer, Integer> counts = new HashMap<>();
        for (var e : sent.entrySet()) {
            List<long[]> l = e.getValue();
            for (int j = 0; j < l.size(); j++) expectEq(l.get(j)[0], (long) j, "offset in " + e.getKey());
            counts.put(e.getKey().partition(), l.size());
        }
        perPartition.put(topic, counts);

        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> cons = new KafkaConsumer<>(m.consumerProps("kc-java-reader", null))) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < PARTS; i++) tps.add(new TopicPartition(topic, i));
            cons.assign(tps);
            cons.seekToBeginning(tps);
            Check.pollUntil(() -> {
                cons.poll(Duration.ofMillis(200)).forEach(got::add);
                return got.size() >= N;
            }, 30000, N + " records");
            Map<TopicPartition, Long> end = cons.endOffsets(tps);
            Map<TopicPartition, Long> beg = cons.beginningOffsets(tps);
            for (TopicPartition tp : tps) {
                expectEq(beg.get(tp), 0L, "beginning offset of " + tp);
                expectEq(end.get(tp), (long) counts.getOrDefault(tp.partition(), 0), "end offset of " + tp);
            }
        }
        expectEq(got.size(), N, "records read");
        Map<Integer, Long> next = new HashMap<>();
        Map<Integer, Long> lastIdx = new HashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : got) {
            long want = next.getOrDefault(r.partition(), 0L);
            expectEq(r.offset(), want, "offset in partition " + r.partition());
            next.put(r.partition(), want + 1);
            long[] sentRec = sent.get(new TopicPartition(topic, r.partition())).get((int) r.offset());
            int i = (int) sentRec[1];
            expect(i > lastIdx.getOrDefault(r.partition(), -1L), "partition %d out of order at %d", r.partition(),
                    r.offset());
            lastIdx.put(r.partition(), (long) i);
            expectEq(s(r.key()), "key-" + i, "key at " + r.partition() + "/" + r.offset());
            expectEq(s(r.value()), ("value " + i + " ").repeat(1 + i % 11), "value of record " + i);
            List<String> hs = new ArrayList<>();
            for (Header h : r.headers()) hs.add(h.key() + "=" + s(h.value()));
            expectEq(hs, List.of("idx=" + i, "codec=" + codec), "headers of record " + i);
            expectEq(r.timestampType(), TimestampType.CREATE_TIME, "timestamp type");
            expectEq(r.timestamp(), sentRec[2], "timestamp of record " + i);
            expect(r.timestamp() >= t0 - 1000 && r.timestamp() <= t1 + 1000, "timestamp %d outside the run",
                    r.timestamp());
            expect(r.leaderEpoch().isPresent(), "record without leader epoch");
        }
    }

    void describeProducers(String topic) throws Exception {
        Map<Integer, Integer> counts = perPartition.get(topic);
        List<TopicPartition> tps = new ArrayList<>();
        for (int p : counts.keySet()) tps.add(new TopicPartition(topic, p));
        var res = m.admin.describeProducers(tps).all().get(15, TimeUnit.SECONDS);
        long pid = -1;
        for (TopicPartition tp : tps) {
            List<ProducerState> ps = res.get(tp).activeProducers();
            expectEq(ps.size(), 1, "active producers on " + tp);
            ProducerState st = ps.get(0);
            expect(st.producerId() >= 0, "producer id %d", st.producerId());
            if (pid >= 0) expectEq(st.producerId(), pid, "same producer id on every partition");
            pid = st.producerId();
            expectEq(st.lastSequence(), counts.get(tp.partition()) - 1, "last sequence on " + tp);
            expect(st.currentTransactionStartOffset().isEmpty(), "an idempotent producer has no transaction");
        }
    }
}
