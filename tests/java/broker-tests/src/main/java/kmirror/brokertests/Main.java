package kmirror.brokertests;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Apache Kafka Java client (4.x) against kbroker: AdminClient (describeCluster,
 * createTopics, describeTopics by name and id, describeConfigs, incrementalAlterConfigs,
 * createPartitions, listOffsets, deleteRecords, deleteTopics), an idempotent producer (acks=all,
 * per-codec) and consumers (read_uncommitted and read_committed, by assignment, incremental fetch
 * sessions) checking every record's key, value and offset. Usage: Main BOOTSTRAP. Prints one line
 * per check; exit 1 on any failure.
 */
public final class Main {
    private static int failures = 0;

    private static void check(boolean ok, String what) {
        System.out.println((ok ? "ok: " : "FAIL: ") + what);
        if (!ok) {
            failures++;
        }
    }

    private static Throwable cause(Throwable t) {
        return t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
    }

    public static void main(String[] args) throws Exception {
        String boot = args[0];
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, boot);
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        try (Admin admin = Admin.create(ap)) {
            runAdmin(admin, boot);
        }
        if (failures > 0) {
            System.out.println(failures + " failure(s)");
            System.exit(1);
        }
        System.out.println("PASS");
    }

    private static void runAdmin(Admin admin, String boot) throws Exception {
        DescribeClusterResult dc = admin.describeCluster();
        check(dc.nodes().get().size() == 1 && dc.nodes().get().iterator().next().id() == 1,
              "describeCluster: one node, id 1");
        check(dc.clusterId().get() != null && dc.clusterId().get().length() == 22,
              "describeCluster: cluster id");
        check(dc.controller().get().id() == 1, "describeCluster: controller");

        Map<String, String> cfg = new HashMap<>();
        cfg.put("retention.ms", "3600000");
        admin.createTopics(List.of(new NewTopic("jt-a", 3, (short) 1).configs(cfg),
                                   new NewTopic("jt-b", 1, (short) 1))).all().get();
        check(admin.listTopics().names().get().containsAll(Set.of("jt-a", "jt-b")),
              "createTopics + listTopics");
        try {
            admin.createTopics(List.of(new NewTopic("jt-a", 1, (short) 1))).all().get();
            check(false, "createTopics existing refused");
        } catch (ExecutionException e) {
            check(cause(e) instanceof TopicExistsException, "createTopics existing refused");
        }
        try {
            admin.createTopics(List.of(new NewTopic("jt-rf", 1, (short) 3))).all().get();
            check(false, "createTopics rf 3 refused");
        } catch (ExecutionException e) {
            check(cause(e) instanceof InvalidReplicationFactorException,
                  "createTopics rf 3 refused");
        }
        try {
            admin.createTopics(List.of(new NewTopic("jt-mn", 1, (short) 1)
                                           .configs(Map.of("mirror.name", "m"))))
                .all().get();
            check(false, "createTopics mirror.name refused");
        } catch (ExecutionException e) {
            check(cause(e) instanceof InvalidConfigurationException,
                  "createTopics mirror.name refused");
        }

        TopicDescription td = admin.describeTopics(List.of("jt-a")).allTopicNames().get()
                                  .get("jt-a");
        check(td.partitions().size() == 3 && td.partitions().get(0).leader().id() == 1,
              "describeTopics by name");
        Uuid id = td.topicId();
        TopicDescription byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(id)))
                                    .allTopicIds().get().get(id);
        check(byId != null && byId.name().equals("jt-a"), "describeTopics by id");

        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, "jt-a");
        Config c = admin.describeConfigs(List.of(res)).all().get().get(res);
        check("3600000".equals(c.get("retention.ms").value()) &&
                  c.get("retention.ms").source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
              "describeConfigs: override and source");
        check(c.get("cleanup.policy").source() == ConfigEntry.ConfigSource.DEFAULT_CONFIG,
              "describeConfigs: default source");
        check(c.get("mirror.name") == null, "describeConfigs: mirror.name hidden");

        Map<ConfigResource, Collection<AlterConfigOp>> ops = new HashMap<>();
        ops.put(res, List.of(
            new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
            new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"),
                              AlterConfigOp.OpType.APPEND)));
        admin.incrementalAlterConfigs(ops).all().get();
        c = admin.describeConfigs(List.of(res)).all().get().get(res);
        check("7200000".equals(c.get("retention.ms").value()), "incrementalAlterConfigs SET");
        check("delete,compact".equals(c.get("cleanup.policy").value()),
              "incrementalAlterConfigs APPEND");
        ops.put(res, List.of(new AlterConfigOp(new ConfigEntry("cleanup.policy", ""),
                                               AlterConfigOp.OpType.DELETE)));
        admin.incrementalAlterConfigs(ops).all().get();
        ops.put(res, List.of(new AlterConfigOp(new ConfigEntry("mirror.name", "m"),
                                               AlterConfigOp.OpType.SET)));
        try {
            admin.incrementalAlterConfigs(ops).all().get();
            check(false, "incrementalAlterConfigs mirror.name refused");
        } catch (ExecutionException e) {
            check(cause(e) instanceof InvalidConfigurationException,
                  "incrementalAlterConfigs mirror.name refused");
        }
        ConfigResource br = new ConfigResource(ConfigResource.Type.BROKER, "1");
        Config bc = admin.describeConfigs(List.of(br)).all().get().get(br);
        check(bc.get("log.retention.hours") != null && bc.get("node.id").isReadOnly(),
              "describeConfigs broker");

        for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd")) {
            produceConsume(admin, boot, "jt-a", codec, 2000);
        }

        long before = System.currentTimeMillis() - 3600_000L;
        TopicPartition tp0 = new TopicPartition("jt-a", 0);
        ListOffsetsResult lo = admin.listOffsets(Map.of(tp0, OffsetSpec.latest()));
        long latest = lo.partitionResult(tp0).get().offset();
        check(admin.listOffsets(Map.of(tp0, OffsetSpec.earliest())).partitionResult(tp0).get()
                  .offset() == 0, "listOffsets earliest");
        check(admin.listOffsets(Map.of(tp0, OffsetSpec.forTimestamp(before)))
                  .partitionResult(tp0).get().offset() == 0, "listOffsets forTimestamp");
        long maxTs = admin.listOffsets(Map.of(tp0, OffsetSpec.maxTimestamp()))
                         .partitionResult(tp0).get().offset();
        check(maxTs >= 0 && maxTs < latest, "listOffsets maxTimestamp");

        admin.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(10))).all().get();
        check(admin.listOffsets(Map.of(tp0, OffsetSpec.earliest())).partitionResult(tp0).get()
                  .offset() == 10, "deleteRecords moves the log start");

        admin.createPartitions(Map.of("jt-b", NewPartitions.increaseTo(3))).all().get();
        check(admin.describeTopics(List.of("jt-b")).allTopicNames().get().get("jt-b").partitions()
                  .size() == 3, "createPartitions");
        admin.deleteTopics(List.of("jt-b")).all().get();
        check(!admin.listTopics().names().get().contains("jt-b"), "deleteTopics");
    }

    private static void produceConsume(Admin admin, String boot, String topic, String codec,
                                       int n) throws Exception {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, boot);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pp.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        Map<String, RecordMetadata> sent = new HashMap<>();
        Map<TopicPartition, Long> endBefore = new HashMap<>();
        for (int p = 0; p < 3; p++) {
            TopicPartition tp = new TopicPartition(topic, p);
            endBefore.put(tp, admin.listOffsets(Map.of(tp, OffsetSpec.latest()))
                                  .partitionResult(tp).get().offset());
        }
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(pp)) {
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                fs.add(prod.send(new ProducerRecord<>(topic, codec + "-k-" + i, codec + "-v-" + i)));
            }
            prod.flush();
            for (int i = 0; i < n; i++) {
                sent.put(codec + "-k-" + i, fs.get(i).get(30, TimeUnit.SECONDS));
            }
        }
        check(sent.size() == n, topic + "/" + codec + ": idempotent producer acknowledged " + n);

        for (String iso : List.of("read_uncommitted", "read_committed")) {
            Properties cp = new Properties();
            cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, boot);
            cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, iso);
            cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "500");
            cp.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, "65536");
            cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                   StringDeserializer.class.getName());
            int got = 0, bad = 0;
            try (KafkaConsumer<String, String> cons = new KafkaConsumer<>(cp)) {
                List<TopicPartition> tps = new ArrayList<>(endBefore.keySet());
                cons.assign(tps);
                for (TopicPartition tp : tps) {
                    cons.seek(tp, endBefore.get(tp));
                }
                long deadline = System.currentTimeMillis() + 60_000;
                while (got < n && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : cons.poll(Duration.ofMillis(500))) {
                        RecordMetadata m = sent.get(r.key());
                        if (m == null || m.partition() != r.partition() || m.offset() != r.offset() ||
                            !r.value().equals(r.key().replace("-k-", "-v-"))) {
                            bad++;
                        }
                        got++;
                    }
                }
                Map<TopicPartition, OffsetAndTimestamp> t =
                    cons.offsetsForTimes(Map.of(tps.get(0), 0L));
                check(t.get(tps.get(0)) != null, topic + "/" + codec + "/" + iso +
                                                     ": offsetsForTimes");
            }
            check(got == n && bad == 0, topic + "/" + codec + "/" + iso + ": consumed " + got +
                                            " of " + n + ", " + bad + " mismatched");
        }
    }
}
