package kmirror.clienttests;

import static kmirror.clienttests.Check.expect;
import static kmirror.clienttests.Check.expectEq;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.common.errors.InvalidTopicException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicIdException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;

/** AdminClient: cluster, topics (ids), configs, ListOffsets, DeleteTopics. */
final class AdminTests {
    private final Main m;
    private final Check c;
    private static String cfgTopic;
    private static Uuid cfgTopicId;

    AdminTests(Main m, Check c) {
        this.m = m;
        this.c = c;
    }

    void run() {
        c.test("admin describeCluster: cluster id, nodes with addresses, controller among them", this::describeCluster);
        boolean made = c.test("admin createTopics with configs: topic id, partitions, RF, configs in the result",
                this::createWithConfigs);
        if (made) {
            c.test("admin describeTopics by name and by topic id: same id, partitions, leaders, ISR",
                    this::describeTopics);
            c.test("admin describeConfigs: overrides DYNAMIC_TOPIC_CONFIG, defaults not, types, broker",
                    this::describeConfigs);
            c.test("admin incrementalAlterConfigs: SET, DELETE, APPEND, SUBTRACT; errors", this::incrementalAlter);
        } else {
            for (String n : List.of("describeTopics", "describeConfigs", "incrementalAlterConfigs"))
                c.notRun("admin " + n, "createTopics failed");
        }
        c.test("admin createTopics errors map to Java exceptions (exists, config, partitions, RF, name)",
                this::createErrors);
        c.test("admin listOffsets: earliest, latest, forTimestamp, maxTimestamp", this::listOffsets);
    }

    void describeCluster() throws Exception {
        DescribeClusterResult r = m.admin.describeCluster();
        String id = r.clusterId().get(15, TimeUnit.SECONDS);
        expect(id != null && id.length() == 22, "cluster id %s is not a 22-character base64 UUID", id);
        Collection<Node> nodes = r.nodes().get(15, TimeUnit.SECONDS);
        expect(!nodes.isEmpty(), "no nodes");
        for (Node n : nodes) expect(n.id() >= 0 && !n.host().isEmpty() && n.port() > 0, "node %s", n);
        Node ctl = r.controller().get(15, TimeUnit.SECONDS);
        expect(ctl != null && nodes.stream().anyMatch(n -> n.id() == ctl.id()),
                "controller %s is not among the nodes %s", ctl, nodes);
    }

    void createWithConfigs() throws Exception {
        cfgTopic = Main.unique("kc-java-cfg");
        Map<String, String> cfg = Main.map("retention.ms", "3600000", "cleanup.policy", "compact",
                "max.message.bytes", "200000");
        CreateTopicsResult r = m.admin.createTopics(List.of(new NewTopic(cfgTopic, 3, (short) 1).configs(cfg)));
        cfgTopicId = r.topicId(cfgTopic).get(30, TimeUnit.SECONDS);
        m.created.add(cfgTopic);
        expect(cfgTopicId != null && !cfgTopicId.equals(Uuid.ZERO_UUID), "topic id %s", cfgTopicId);
        expectEq(r.numPartitions(cfgTopic).get(), 3, "numPartitions");
        expectEq(r.replicationFactor(cfgTopic).get(), 1, "replicationFactor");
        Config got = r.config(cfgTopic).get();
        for (var e : cfg.entrySet()) {
            ConfigEntry ce = got.get(e.getKey());
            expect(ce != null, "config %s missing from the CreateTopics result", e.getKey());
            expectEq(ce.value(), e.getValue(), e.getKey());
            expectEq(ce.source(), ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, e.getKey() + " source");
        }
        m.waitLeaders(cfgTopic, 3);
    }

    void describeTopics() throws Exception {
        TopicDescription byName = m.admin.describeTopics(TopicCollection.ofTopicNames(List.of(cfgTopic)))
                .topicNameValues().get(cfgTopic).get(15, TimeUnit.SECONDS);
        TopicDescription byId = m.admin.describeTopics(TopicCollection.ofTopicIds(List.of(cfgTopicId)))
                .topicIdValues().get(cfgTopicId).get(15, TimeUnit.SECONDS);
        for (TopicDescription d : List.of(byName, byId)) {
            expectEq(d.name(), cfgTopic, "name");
            expectEq(d.topicId(), cfgTopicId, "topic id");
            expectEq(d.isInternal(), false, "internal");
            expectEq(d.partitions().size(), 3, "partitions");
            Set<Integer> ids = m.brokers.stream().map(Node::id).collect(Collectors.toSet());
            for (int i = 0; i < 3; i++) {
                TopicPartitionInfo p = d.partitions().get(i);
                expectEq(p.partition(), i, "partition order");
                expect(p.leader() != null && ids.contains(p.leader().id()), "partition %d leader %s", i, p.leader());
                expect(p.replicas().stream().anyMatch(n -> n.id() == p.leader().id()), "leader not in replicas");
                expect(p.isr().stream().anyMatch(n -> n.id() == p.leader().id()), "leader not in ISR");
            }
        }
        try {
            Uuid nobody = Uuid.randomUuid();
            m.admin.describeTopics(TopicCollection.ofTopicIds(List.of(nobody))).topicIdValues().get(nobody)
                    .get(15, TimeUnit.SECONDS);
            throw new Check.Failure("describeTopics of a random topic id succeeded");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof UnknownTopicIdException, "random topic id: %s", e.getCause());
        }
        String nobody = Main.unique("kc-java-none");
        try {
            m.admin.describeTopics(List.of(nobody)).topicNameValues().get(nobody).get(15, TimeUnit.SECONDS);
            throw new Check.Failure("describeTopics of an unknown name succeeded");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof UnknownTopicOrPartitionException, "unknown name: %s", e.getCause());
        }
    }

    private Map<String, ConfigEntry> configs(String topic) throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config cfg = m.admin.describeConfigs(List.of(res)).all().get(15, TimeUnit.SECONDS).get(res);
        Map<String, ConfigEntry> out = new TreeMap<>();
        for (ConfigEntry e : cfg.entries()) out.put(e.name(), e);
        return out;
    }

    private Map<String, String> overrides(String topic) throws Exception {
        Map<String, String> out = new TreeMap<>();
        for (ConfigEntry e : configs(topic).values())
            if (e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG) out.put(e.name(), e.value());
        return out;
    }

    /**
     * Waits until the topic's overrides are what an accepted change made them. Kafka (KRaft) answers
     * IncrementalAlterConfigs once the controller has it; the broker that serves DescribeConfigs
     * applies the change from the metadata log a moment later, so a describe right after the alter
     * may still show the old values.
     */
    private void awaitOverrides(String topic, Map<String, String> want, String what) throws Exception {
        TreeMap<String, String> w = new TreeMap<>(want);
        Check.waitUntil(() -> {
            try {
                return overrides(topic).equals(w);
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }, 15000, what + " to show");
        expectEq(overrides(topic), w, what);
    }

    void describeConfigs() throws Exception {
        Map<String, ConfigEntry> all = configs(cfgTopic);
        expect(all.size() >= 25, "only %d topic configs", all.size());
        expectEq(overrides(cfgTopic),
                new TreeMap<>(Main.map("retention.ms", "3600000", "cleanup.policy", "compact",
                        "max.message.bytes", "200000")), "topic overrides");
        for (String k : List.of("segment.bytes", "min.insync.replicas", "compression.type", "retention.bytes")) {
            ConfigEntry e = all.get(k);
            expect(e != null, "%s missing", k);
            expect(e.source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, "%s source %s", k, e.source());
            expect(!e.isReadOnly() && !e.isSensitive(), "%s read-only or sensitive", k);
        }
        expectEq(all.get("retention.ms").type(), ConfigEntry.ConfigType.LONG, "retention.ms type");
        expectEq(all.get("cleanup.policy").type(), ConfigEntry.ConfigType.LIST, "cleanup.policy type");
        expectEq(all.get("segment.bytes").type(), ConfigEntry.ConfigType.INT, "segment.bytes type");
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(m.brokers.get(0).id()));
        Config b = m.admin.describeConfigs(List.of(broker)).all().get(15, TimeUnit.SECONDS).get(broker);
        for (String k : List.of("log.retention.hours", "num.partitions")) {
            ConfigEntry e = b.get(k);
            expect(e != null && e.value() != null && e.value().matches("-?[0-9]+"), "broker %s = %s", k, e);
        }
    }

    private void alter(String topic, AlterConfigOp... ops) throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        m.admin.incrementalAlterConfigs(Map.of(res, List.of(ops))).all().get(15, TimeUnit.SECONDS);
    }

    private static AlterConfigOp op(AlterConfigOp.OpType t, String k, String v) {
        return new AlterConfigOp(new ConfigEntry(k, v), t);
    }

    void incrementalAlter() throws Exception {
        alter(cfgTopic, op(AlterConfigOp.OpType.SET, "retention.ms", "7200000"),
                op(AlterConfigOp.OpType.DELETE, "max.message.bytes", null),
                op(AlterConfigOp.OpType.APPEND, "cleanup.policy", "delete"));
        awaitOverrides(cfgTopic, Main.map("retention.ms", "7200000", "cleanup.policy", "compact,delete"),
                "overrides after SET/DELETE/APPEND");
        alter(cfgTopic, op(AlterConfigOp.OpType.SUBTRACT, "cleanup.policy", "compact"));
        awaitOverrides(cfgTopic, Main.map("retention.ms", "7200000", "cleanup.policy", "delete"),
                "overrides after SUBTRACT");
        Map<String, Class<? extends Throwable>> bad = new HashMap<>();
        Object[][] cases = {
            {cfgTopic, op(AlterConfigOp.OpType.SET, "retention.ms", "abc"), InvalidConfigurationException.class},
            {cfgTopic, op(AlterConfigOp.OpType.SET, "no.such.config", "1"), InvalidConfigurationException.class},
            {cfgTopic, op(AlterConfigOp.OpType.APPEND, "max.message.bytes", "5"), InvalidConfigurationException.class},
            {Main.unique("kc-java-none"), op(AlterConfigOp.OpType.SET, "retention.ms", "1000"),
                UnknownTopicOrPartitionException.class},
        };
        for (Object[] cs : cases) {
            try {
                alter((String) cs[0], (AlterConfigOp) cs[1]);
                throw new Check.Failure("accepted: " + cs[1]);
            } catch (ExecutionException e) {
                expect(((Class<?>) cs[2]).isInstance(e.getCause()), "%s on %s: %s", cs[1], cs[0], e.getCause());
            }
        }
        expectEq(overrides(cfgTopic), new TreeMap<>(Main.map("retention.ms", "7200000", "cleanup.policy", "delete")),
                "overrides after refused changes");
    }

    void createErrors() throws Exception {
        String base = Main.unique("kc-java-bad");
        String existing = Main.unique("kc-java-exists");
        m.createTopic(existing, 1, null);
        Object[][] cases = {
            {new NewTopic(existing, 1, (short) 1), TopicExistsException.class},
            {new NewTopic(base + "-c", 1, (short) 1).configs(Main.map("cleanup.policy", "bogus")),
                InvalidConfigurationException.class},
            {new NewTopic(base + "-k", 1, (short) 1).configs(Main.map("no.such.config", "1")),
                InvalidConfigurationException.class},
            {new NewTopic(base + "-p", 0, (short) 1), InvalidPartitionsException.class},
            {new NewTopic(base + "-r", 1, (short) (m.brokers.size() + 1)), InvalidReplicationFactorException.class},
            {new NewTopic("kc-java/bad", 1, (short) 1), InvalidTopicException.class},
        };
        for (Object[] cs : cases) {
            NewTopic nt = (NewTopic) cs[0];
            try {
                m.admin.createTopics(List.of(nt)).all().get(15, TimeUnit.SECONDS);
                m.created.add(nt.name());
                throw new Check.Failure("created: " + nt);
            } catch (ExecutionException e) {
                expect(((Class<?>) cs[1]).isInstance(e.getCause()), "%s: %s", nt, e.getCause());
            }
        }
        String vonly = base + "-v";
        m.admin.createTopics(List.of(new NewTopic(vonly, 2, (short) 1)), new CreateTopicsOptions().validateOnly(true))
                .all().get(15, TimeUnit.SECONDS);
        Set<String> names = m.admin.listTopics().names().get(15, TimeUnit.SECONDS);
        expect(names.stream().noneMatch(n -> n.startsWith(base)), "refused or validate-only topics exist: %s",
                names.stream().filter(n -> n.startsWith(base)).collect(Collectors.toList()));
    }

    void listOffsets() throws Exception {
        String topic = Main.unique("kc-java-offsets");
        m.createTopic(topic, 1, null);
        long base = System.currentTimeMillis() - 100_000;
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(m.producerProps("kc-java-offsets"))) {
            for (int i = 0; i < 10; i++) {
                // Timestamps 1 s apart, the largest one in the middle (record 6).
                long ts = i == 6 ? base + 50_000 : base + 1000L * i;
                p.send(new ProducerRecord<>(topic, 0, ts, null, ("r" + i).getBytes())).get(30, TimeUnit.SECONDS);
            }
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        Map<String, ListOffsetsResultInfo> got = new HashMap<>();
        Map<String, OffsetSpec> specs = Map.of("earliest", OffsetSpec.earliest(), "latest", OffsetSpec.latest(),
                "ts+4.5s", OffsetSpec.forTimestamp(base + 4500), "ts0", OffsetSpec.forTimestamp(base),
                "ts after all", OffsetSpec.forTimestamp(base + 60_000), "max", OffsetSpec.maxTimestamp());
        for (var e : specs.entrySet())
            got.put(e.getKey(), m.admin.listOffsets(Map.of(tp, e.getValue())).partitionResult(tp)
                    .get(15, TimeUnit.SECONDS));
        expectEq(got.get("earliest").offset(), 0L, "earliest");
        expectEq(got.get("latest").offset(), 10L, "latest");
        expectEq(got.get("ts+4.5s").offset(), 5L, "offset for base+4.5 s");
        expectEq(got.get("ts+4.5s").timestamp(), base + 5000, "its timestamp");
        expectEq(got.get("ts0").offset(), 0L, "offset for base");
        expectEq(got.get("ts after all").offset(), -1L, "offset for a timestamp after every record");
        expectEq(got.get("max").offset(), 6L, "maxTimestamp offset");
        expectEq(got.get("max").timestamp(), base + 50_000, "maxTimestamp timestamp");
        expect(got.get("latest").leaderEpoch().isPresent(), "latest has no leader epoch");
    }

    /** Last: DeleteTopics by name and by id, and the errors for unknown ones. */
    void deleteAll() {
        c.test("admin deleteTopics by name and by id: gone from listTopics; unknown name/id errors",
                this::deleteTopics);
    }

    void deleteTopics() throws Exception {
        expect(!m.created.isEmpty(), "no topics to delete");
        List<String> names = new ArrayList<>(m.created);
        String byIdName = names.remove(0);
        Uuid id = m.admin.describeTopics(List.of(byIdName)).topicNameValues().get(byIdName).get(15, TimeUnit.SECONDS)
                .topicId();
        m.admin.deleteTopics(TopicCollection.ofTopicIds(List.of(id))).all().get(30, TimeUnit.SECONDS);
        if (!names.isEmpty()) m.admin.deleteTopics(names).all().get(30, TimeUnit.SECONDS);
        m.created.clear();
        List<String> all = new ArrayList<>(names);
        all.add(byIdName);
        Check.waitUntil(() -> {
            try {
                Set<String> left = m.admin.listTopics().names().get(15, TimeUnit.SECONDS);
                return all.stream().noneMatch(left::contains);
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }, 30000, "deleted topics to leave listTopics");
        try {
            m.admin.deleteTopics(List.of(Main.unique("kc-java-none"))).all().get(15, TimeUnit.SECONDS);
            throw new Check.Failure("deleting an unknown topic succeeded");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof UnknownTopicOrPartitionException, "unknown name: %s", e.getCause());
        }
        try {
            m.admin.deleteTopics(TopicCollection.ofTopicIds(List.of(Uuid.randomUuid()))).all()
                    .get(15, TimeUnit.SECONDS);
            throw new Check.Failure("deleting an unknown topic id succeeded");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof UnknownTopicIdException, "unknown id: %s", e.getCause());
        }
    }
}
