import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;

/**
 * Kafka's own Java clients (KafkaProducer, KafkaConsumer, Admin) against a Kafka-protocol broker.
 * Usage: JavaClientCheck BOOTSTRAP TIMESTAMP_BASE. Prints one JSON object per line per scenario:
 * {"scenario": name, "ok": true|false, "elapsed_ms": n, "error": class, "message": text, ...}.
 * Records are printed as [partition, offset, timestamp, key, value, header values...] (strings,
 * null for a null key or value) so that the caller compares what was produced with what was read.
 * Compiled with Clients.java (the client settings) and CheckOutput.java (the JSON lines), which
 * TransactionCheck shares.
 */
public final class JavaClientCheck {
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final int PER_CODEC = 120;
    static Clients clients;
    static long tsBase;

    public static void main(String[] args) throws Exception {
        clients = new Clients(args[0], 20_000);
        tsBase = Long.parseLong(args[1]);
        try (Admin admin = Admin.create(adminProps())) {
            run("create_topics", () -> createTopics(admin));
            for (String codec : CODECS) {
                run("produce_consume_" + codec, () -> produceConsume(codec));
            }
            run("offsets_for_times", JavaClientCheck::offsetsForTimes);
            run("seek", JavaClientCheck::seek);
            run("read_committed", JavaClientCheck::readCommitted);
            run("group_commit", JavaClientCheck::groupCommit);
            run("describe_topics", () -> describeTopics(admin));
            run("describe_configs", () -> describeConfigs(admin));
            run("list_offsets", () -> listOffsets(admin));
            run("group_offsets", () -> groupOffsets(admin));
            run("list_groups", () -> listGroups(admin));
            run("describe_groups", () -> describeGroups(admin));
            run("delete_topics", () -> deleteTopics(admin));
            run("transactions", JavaClientCheck::transactions);
            run("create_partitions", () -> {
                admin.createPartitions(Map.of("jc-group", NewPartitions.increaseTo(4))).all().get();
                return new LinkedHashMap<>();
            });
            run("delete_records", () -> {
                admin.deleteRecords(Map.of(new TopicPartition("jc-none", 0), RecordsToDelete.beforeOffset(1)))
                        .all().get();
                return new LinkedHashMap<>();
            });
            run("incremental_alter_configs", () -> {
                ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, "jc-none");
                admin.incrementalAlterConfigs(Map.of(r, List.of(new org.apache.kafka.clients.admin.AlterConfigOp(
                        new ConfigEntry("retention.ms", "1000"),
                        org.apache.kafka.clients.admin.AlterConfigOp.OpType.SET)))).all().get();
                return new LinkedHashMap<>();
            });
            run("describe_acls", () -> {
                admin.describeAcls(org.apache.kafka.common.acl.AclBindingFilter.ANY).values().get();
                return new LinkedHashMap<>();
            });
            run("consumer_group_protocol", () -> {
                Properties p = clients.consumer("jc-g848", "read_uncommitted");
                p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
                try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
                    c.subscribe(List.of("jc-group"));
                    long deadline = System.currentTimeMillis() + 20_000;
                    int n = 0;
                    while (System.currentTimeMillis() < deadline) {
                        n += c.poll(Duration.ofMillis(200)).count();
                    }
                    return new LinkedHashMap<>(Map.of("records", n));
                }
            });
        }
        System.out.flush();
    }

    // ------------------------------------------------------------------ scenarios

    static Map<String, Object> createTopics(Admin admin) throws Exception {
        List<NewTopic> topics = new ArrayList<>();
        for (String codec : CODECS) {
            topics.add(new NewTopic("jc-" + codec, 2, (short) 1));
        }
        topics.add(new NewTopic("jc-group", 2, (short) 1));
        topics.add(new NewTopic("jc-configs", 3, (short) 1)
                .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "compact")));
        topics.add(new NewTopic("jc-doomed", 1, (short) 1));
        admin.createTopics(topics).all().get();
        Map<String, Object> out = new LinkedHashMap<>();
        List<String> names = new ArrayList<>(admin.listTopics().names().get());
        Collections.sort(names);
        out.put("topics", names);
        String dup = null;
        try {
            admin.createTopics(List.of(new NewTopic("jc-group", 1, (short) 1))).all().get();
        } catch (ExecutionException e) {
            dup = e.getCause().getClass().getSimpleName();
        }
        out.put("duplicate_error", dup);
        return out;
    }

    static Map<String, Object> produceConsume(String codec) throws Exception {
        String topic = "jc-" + codec;
        Properties p = clients.producer();
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        List<List<Object>> produced = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            List<ProducerRecord<byte[], byte[]>> sent = new ArrayList<>();
            for (int i = 0; i < PER_CODEC; i++) {
                byte[] key = i % 17 == 5 ? null : Clients.bytes("key-" + i);
                String text = codec + " value " + i + " " + "abcdefgh".repeat(i % 9);
                byte[] value = i % 23 == 7 ? null : Clients.bytes(text);
                ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(topic, i % 2, tsBase + i * 1000L, key, value);
                if (i % 3 == 0) {
                    rec.headers().add("h" + (i % 4), Clients.bytes("header-" + i));
                }
                sent.add(rec);
                acks.add(producer.send(rec));
            }
            producer.flush();
            for (int i = 0; i < sent.size(); i++) {
                RecordMetadata md = acks.get(i).get();
                produced.add(row(md.partition(), md.offset(), sent.get(i).timestamp(), sent.get(i).key(),
                        sent.get(i).value(), sent.get(i).headers()));
            }
        }
        List<List<Object>> consumed = readAll(topic, 2, "read_uncommitted", PER_CODEC);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("produced", produced);
        out.put("consumed", consumed);
        return out;
    }

    static Map<String, Object> offsetsForTimes() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(clients.consumer(null, "read_uncommitted"))) {
            TopicPartition tp0 = new TopicPartition("jc-none", 0);
            TopicPartition tp1 = new TopicPartition("jc-none", 1);
            // partition 0 holds the even i (timestamps base + i*1000), partition 1 the odd ones
            Map<TopicPartition, Long> query = new HashMap<>();
            query.put(tp0, tsBase + 20500L);       // first even i with ts >= 20.5 s: i = 22 -> offset 11
            query.put(tp1, tsBase + 7000L);        // exactly i = 7 -> offset 3
            Map<TopicPartition, OffsetAndTimestamp> found = c.offsetsForTimes(query, Duration.ofSeconds(15));
            out.put("p0", List.of(found.get(tp0).offset(), found.get(tp0).timestamp()));
            out.put("p1", List.of(found.get(tp1).offset(), found.get(tp1).timestamp()));
            Map<TopicPartition, OffsetAndTimestamp> none = c.offsetsForTimes(
                    Map.of(tp0, tsBase + 10_000_000L), Duration.ofSeconds(15));
            out.put("after_end", none.get(tp0) == null ? null : none.get(tp0).offset());
            out.put("begin", c.beginningOffsets(List.of(tp0, tp1)).values().stream().sorted().toList());
            out.put("end", c.endOffsets(List.of(tp0, tp1)).values().stream().sorted().toList());
        }
        return out;
    }

    static Map<String, Object> seek() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        TopicPartition tp = new TopicPartition("jc-gzip", 1);
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(clients.consumer(null, "read_uncommitted"))) {
            c.assign(List.of(tp));
            c.seek(tp, 17);
            out.put("after_seek", firstOffsets(c, 3));
            c.seek(tp, 4);
            out.put("after_seek_back", firstOffsets(c, 1));
            c.seekToEnd(List.of(tp));
            out.put("position_at_end", c.position(tp, Duration.ofSeconds(15)));
            c.seekToBeginning(List.of(tp));
            out.put("position_at_begin", c.position(tp, Duration.ofSeconds(15)));
        }
        return out;
    }

    static Map<String, Object> readCommitted() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("consumed", readAll("jc-zstd", 2, "read_committed", PER_CODEC));
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(clients.consumer(null, "read_committed"))) {
            out.put("end", c.endOffsets(List.of(new TopicPartition("jc-zstd", 0), new TopicPartition("jc-zstd", 1)))
                    .values().stream().sorted().toList());
        }
        return out;
    }

    static Map<String, Object> groupCommit() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String topic = "jc-group";
        produceSimple(topic, 0, 40);
        List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
        int first = 0;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(clients.consumer("jc-g1", "read_committed"))) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (first < 40 && System.currentTimeMillis() < deadline) {
                first += c.poll(Duration.ofMillis(200)).count();
            }
            out.put("assignment_first", c.assignment().size());
            c.commitSync(Duration.ofSeconds(15));
            Map<TopicPartition, OffsetAndMetadata> committed = c.committed(new java.util.HashSet<>(tps),
                    Duration.ofSeconds(15));
            out.put("committed_first", offsetsOf(committed, tps));
        }
        out.put("first_consumer_read", first);
        produceSimple(topic, 40, 6);
        List<String> second = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(clients.consumer("jc-g1", "read_committed"))) {
            out.put("committed_seen_by_new_consumer", offsetsOf(c.committed(new java.util.HashSet<>(tps),
                    Duration.ofSeconds(15)), tps));
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (second.size() < 6 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    second.add(Clients.str(r.value()));
                }
            }
            // nothing else arrives: the committed offsets were the starting point, not 0
            long quiet = System.currentTimeMillis() + 1500;
            while (System.currentTimeMillis() < quiet) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    second.add(Clients.str(r.value()));
                }
            }
            c.commitSync(Duration.ofSeconds(15));
        }
        Collections.sort(second);
        out.put("second_consumer_values", second);
        return out;
    }

    static Map<String, Object> describeTopics(Admin admin) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        Map<String, TopicDescription> d = admin.describeTopics(List.of("jc-configs", "jc-group")).allTopicNames().get();
        for (TopicDescription td : d.values()) {
            out.put(td.name(), Map.of("partitions", td.partitions().size(), "internal", td.isInternal(),
                    "topic_id_set", !td.topicId().equals(org.apache.kafka.common.Uuid.ZERO_UUID),
                    "leader", td.partitions().get(0).leader().id()));
        }
        String missing = null;
        try {
            admin.describeTopics(List.of("jc-no-such-topic")).allTopicNames().get();
        } catch (ExecutionException e) {
            missing = e.getCause().getClass().getSimpleName();
        }
        out.put("missing_error", missing);
        out.put("cluster_nodes", admin.describeCluster().nodes().get().size());
        return out;
    }

    static Map<String, Object> describeConfigs(Admin admin) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, "jc-configs");
        Config cfg = admin.describeConfigs(List.of(r)).all().get().get(r);
        for (String name : List.of("retention.ms", "cleanup.policy", "segment.bytes", "max.message.bytes")) {
            ConfigEntry e = cfg.get(name);
            out.put(name, e == null ? null : List.of(String.valueOf(e.value()), e.source().name()));
        }
        return out;
    }

    static Map<String, Object> listOffsets(Admin admin) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        TopicPartition tp = new TopicPartition("jc-lz4", 1);
        out.put("earliest", admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get().offset());
        out.put("latest", admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get().offset());
        ListOffsetsResult.ListOffsetsResultInfo byTime = admin.listOffsets(
                Map.of(tp, OffsetSpec.forTimestamp(tsBase + 30_000L))).partitionResult(tp).get();
        out.put("for_timestamp", List.of(byTime.offset(), byTime.timestamp()));
        ListOffsetsResult.ListOffsetsResultInfo max = admin.listOffsets(
                Map.of(tp, OffsetSpec.maxTimestamp())).partitionResult(tp).get();
        out.put("max_timestamp", List.of(max.offset(), max.timestamp()));
        return out;
    }

    static Map<String, Object> groupOffsets(Admin admin) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        Map<TopicPartition, OffsetAndMetadata> m = admin.listConsumerGroupOffsets("jc-g1")
                .partitionsToOffsetAndMetadata().get();
        out.put("offsets", offsetsOf(m, List.of(new TopicPartition("jc-group", 0), new TopicPartition("jc-group", 1))));
        return out;
    }

    static Map<String, Object> listGroups(Admin admin) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        List<String> ids = new ArrayList<>();
        for (GroupListing g : admin.listGroups().all().get()) {
            ids.add(g.groupId());
        }
        Collections.sort(ids);
        out.put("groups", ids);
        return out;
    }

    static Map<String, Object> describeGroups(Admin admin) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(clients.consumer("jc-g2", "read_committed"))) {
            c.subscribe(List.of("jc-group"));
            long deadline = System.currentTimeMillis() + 30_000;
            while (c.assignment().isEmpty() && System.currentTimeMillis() < deadline) {
                c.poll(Duration.ofMillis(200));
            }
            out.put("live", groupSummary(admin, "jc-g2"));
        }
        out.put("after_close", groupSummary(admin, "jc-g2"));
        out.put("committed_only", groupSummary(admin, "jc-g1"));
        out.put("unknown", groupSummary(admin, "jc-no-such-group"));
        return out;
    }

    static Map<String, Object> groupSummary(Admin admin, String group) throws Exception {
        var d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("state", d.groupState().toString());
        out.put("assignor", d.partitionAssignor());
        List<String> assigned = new ArrayList<>();
        for (var m : d.members()) {
            for (TopicPartition tp : m.assignment().topicPartitions()) {
                assigned.add(tp.toString());
            }
        }
        Collections.sort(assigned);
        out.put("members", d.members().size());
        out.put("assigned", assigned);
        return out;
    }

    static Map<String, Object> deleteTopics(Admin admin) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        admin.deleteTopics(List.of("jc-doomed")).all().get();
        long deadline = System.currentTimeMillis() + 10_000;
        boolean gone = false;
        while (!gone && System.currentTimeMillis() < deadline) {
            gone = !admin.listTopics().names().get().contains("jc-doomed");
            if (!gone) {
                Thread.sleep(100);
            }
        }
        out.put("gone", gone);
        String again = null;
        try {
            admin.deleteTopics(List.of("jc-doomed")).all().get();
        } catch (ExecutionException e) {
            again = e.getCause().getClass().getSimpleName();
        }
        out.put("delete_again_error", again);
        return out;
    }

    static Map<String, Object> transactions() throws Exception {
        Properties p = clients.transactionalProducer("jc-txn");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>("jc-none", 0, null, Clients.bytes("in a transaction"))).get();
            producer.commitTransaction();
        }
        return new LinkedHashMap<>();
    }

    // ------------------------------------------------------------------ helpers

    /** One scenario's JSON line: {"scenario": NAME, "ok": ..., ...}. */
    static void run(String name, CheckOutput.Step scenario) {
        CheckOutput.report("scenario", name, scenario);
    }

    static void produceSimple(String topic, int from, int n) throws Exception {
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(clients.producer())) {
            for (int i = from; i < from + n; i++) {
                producer.send(Clients.record(topic, i % 2, "k" + i, "g" + i));
            }
            producer.flush();
        }
    }

    static List<List<Object>> readAll(String topic, int partitions, String isolation, int expected) {
        List<List<Object>> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> c = clients.readerFromStart(topic, partitions, isolation)) {
            long deadline = System.currentTimeMillis() + 20_000;
            while (got.size() < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    got.add(row(r.partition(), r.offset(), r.timestamp(), r.key(), r.value(), r.headers()));
                }
            }
        }
        return got;
    }

    static List<Long> firstOffsets(KafkaConsumer<byte[], byte[]> c, int n) {
        List<Long> offsets = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 15_000;
        while (offsets.size() < n && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                if (offsets.size() < n) {
                    offsets.add(r.offset());
                }
            }
        }
        return offsets;
    }

    static List<Object> offsetsOf(Map<TopicPartition, OffsetAndMetadata> m, List<TopicPartition> tps) {
        List<Object> out = new ArrayList<>();
        for (TopicPartition tp : tps) {
            OffsetAndMetadata om = m.get(tp);
            out.add(om == null ? null : om.offset());
        }
        return out;
    }

    static List<Object> row(int partition, long offset, long ts, byte[] key, byte[] value,
                            Iterable<Header> headers) {
        List<Object> r = new ArrayList<>(Arrays.asList(partition, offset, ts, Clients.str(key),
                Clients.str(value)));
        for (Header h : headers) {
            r.add(h.key() + "=" + Clients.str(h.value()));
        }
        return r;
    }

    static Properties adminProps() {
        Properties p = clients.common();
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "java-admin");
        return p;
    }
}
