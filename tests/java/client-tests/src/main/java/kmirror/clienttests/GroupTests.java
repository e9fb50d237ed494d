package kmirror.clienttests;

import static kmirror.clienttests.Check.expect;
import static kmirror.clienttests.Check.expectEq;
import static kmirror.clienttests.ProduceConsumeTests.b;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.GroupIdNotFoundException;

/** A consumer group: commit, leave, resume at the commits; the Admin group APIs. */
final class GroupTests {
    private final Main m;
    private final Check c;
    private static final int PARTS = 3;
    private static final int PER_PART = 30;

    GroupTests(Main m, Check c) {
        this.m = m;
        this.c = c;
    }

    void run() {
        c.test("consumer group (" + m.groupProtocol + "): commitSync, close, a new member resumes at the commits,"
                + " every record once; describe/list offsets/delete group", this::commitResume);
    }

    private KafkaConsumer<byte[], byte[]> member(String name, String topic, String group) {
        Properties p = m.consumerProps("kc-java-" + name, group);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 7);
        KafkaConsumer<byte[], byte[]> cons = new KafkaConsumer<>(p);
        cons.subscribe(List.of(topic));
        return cons;
    }

    void commitResume() throws Exception {
        String topic = Main.unique("kc-java-group");
        String group = Main.unique("kc-java-group");
        m.createTopic(topic, PARTS, null);
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(m.producerProps("kc-java-group"))) {
            for (int j = 0; j < PER_PART; j++)
                for (int part = 0; part < PARTS; part++)
                    p.send(new ProducerRecord<>(topic, part, b("k" + j), b(part + ":" + j)));
            p.flush();
        }
        List<ConsumerRecord<byte[], byte[]>> first = new ArrayList<>();
        Map<TopicPartition, OffsetAndMetadata> committed;
        try (KafkaConsumer<byte[], byte[]> c1 = member("first", topic, group)) {
            Check.pollUntil(() -> {
                var rs = c1.poll(Duration.ofMillis(200));
                rs.forEach(first::add);
                if (!rs.isEmpty()) c1.commitSync();
                return first.size() >= 30;
            }, 30000, "the first member to consume 30 records");
            expectEq(c1.assignment().size(), PARTS, "the only member's assignment");
            committed = c1.committed(c1.assignment());
            ConsumerGroupDescription d = m.admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                    .get(15, TimeUnit.SECONDS);
            expectEq(d.groupState(), GroupState.STABLE, "group state with one member");
            expectEq(d.members().size(), 1, "members");
            expectEq(d.members().iterator().next().assignment().topicPartitions(), c1.assignment(),
                    "described assignment");
        }
        Map<Integer, Long> last = new TreeMap<>();
        for (var r : first) last.merge(r.partition(), r.offset(), Math::max);
        Map<Integer, Long> committedOffsets = new TreeMap<>();
        committed.forEach((tp, om) -> committedOffsets.put(tp.partition(), om == null ? 0L : om.offset()));
        Map<Integer, Long> expectCommitted = new TreeMap<>();
        for (int part = 0; part < PARTS; part++) expectCommitted.put(part, last.getOrDefault(part, -1L) + 1);
        expectEq(committedOffsets, expectCommitted, "committed offsets = last consumed + 1");
        Map<TopicPartition, OffsetAndMetadata> listed = m.admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get(15, TimeUnit.SECONDS);
        Map<Integer, Long> listedOffsets = new TreeMap<>();
        listed.forEach((tp, om) -> listedOffsets.put(tp.partition(), om.offset()));
        expectEq(listedOffsets, expectCommitted, "listConsumerGroupOffsets");
        ConsumerGroupDescription empty = m.admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                .get(15, TimeUnit.SECONDS);
        expectEq(empty.groupState(), GroupState.EMPTY, "group state after the member left");

        List<ConsumerRecord<byte[], byte[]>> second = new ArrayList<>();
        int rest = PARTS * PER_PART - first.size();
        try (KafkaConsumer<byte[], byte[]> c2 = member("second", topic, group)) {
            Check.pollUntil(() -> {
                var rs = c2.poll(Duration.ofMillis(200));
                rs.forEach(second::add);
                if (!rs.isEmpty()) c2.commitSync();
                return second.size() >= rest;
            }, 30000, "the second member to consume the other " + rest + " records");
        }
        Map<Integer, Long> starts = new TreeMap<>();
        for (var r : second) starts.merge(r.partition(), r.offset(), Math::min);
        Map<Integer, Long> expectStarts = new TreeMap<>();
        expectCommitted.forEach((part, off) -> {
            if (off < PER_PART) expectStarts.put(part, off);
        });
        expectEq(starts, expectStarts, "where the second member started");
        Map<Integer, List<Long>> all = new HashMap<>();
        for (var r : first) all.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.offset());
        for (var r : second) all.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.offset());
        for (int part = 0; part < PARTS; part++) {
            List<Long> offs = all.getOrDefault(part, List.of());
            List<Long> want = new ArrayList<>();
            for (long o = 0; o < PER_PART; o++) want.add(o);
            expectEq(offs, want, "offsets of partition " + part + " over both members");
        }

        m.admin.deleteConsumerGroups(List.of(group)).all().get(15, TimeUnit.SECONDS);
        try {
            m.admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get(15, TimeUnit.SECONDS);
            // Kafka answers a described unknown group with state DEAD (classic) or GROUP_ID_NOT_FOUND.
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof GroupIdNotFoundException, "describe deleted group: %s", e.getCause());
            return;
        }
        ConsumerGroupDescription gone = m.admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                .get(15, TimeUnit.SECONDS);
        expectEq(gone.groupState(), GroupState.DEAD, "state of the deleted group");
    }
}
