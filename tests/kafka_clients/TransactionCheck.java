import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;

/**
 * Kafka's transactional Java producer (KIP-98, KIP-447) against a Kafka-protocol broker, one mode
 * per run: TransactionCheck BOOTSTRAP MODE ARGS... Prints one JSON object per line; the last one
 * is {"mode": MODE, "ok": true|false, "error": class, "message": text, ...}. Records are printed
 * as [partition, offset, key, value] so that the caller compares what a read_committed consumer
 * sees with what was committed. Compiled with Clients.java (the client settings) and
 * CheckOutput.java (the JSON lines), which JavaClientCheck shares.
 *
 *   topics T:PARTITIONS...                   create the topics (replication factor 1 unless RF=n is given first)
 *   commit TOPIC TXID N PREFIX                one transaction of N records, committed
 *   abort TOPIC TXID N PREFIX                 one transaction of N records, flushed, then aborted
 *   fence TOPIC TXID                          an old producer fenced by a new one with the same transactional.id
 *   timeout TOPIC TXID TIMEOUT_MS             a transaction left open past transaction.timeout.ms
 *   ctp IN OUT GROUP TXID N                   consume-transform-produce of N records, offsets in the transaction
 *   hold TOPIC TXID                           a transaction left open until stdin closes, then aborted
 *   failover TOPIC TXID N                     N records, the coordinator's id printed, a line of stdin awaited
 *                                             (the caller kills that broker), N more records, committed
 *   read TOPIC PARTITIONS ISOLATION           every record up to the end offsets (the LSO under read_committed)
 */
public final class TransactionCheck {
    static Clients clients;

    public static void main(String[] args) {
        clients = new Clients(args[0], 30_000);
        String mode = args[1];
        String[] rest = java.util.Arrays.copyOfRange(args, 2, args.length);
        CheckOutput.report("mode", mode, () -> switch (mode) {
            case "topics" -> topics(rest);
            case "commit" -> oneTransaction(rest[0], rest[1], Integer.parseInt(rest[2]), rest[3], true);
            case "abort" -> oneTransaction(rest[0], rest[1], Integer.parseInt(rest[2]), rest[3], false);
            case "fence" -> fence(rest[0], rest[1]);
            case "timeout" -> timeout(rest[0], rest[1], Integer.parseInt(rest[2]));
            case "ctp" -> consumeTransformProduce(rest[0], rest[1], rest[2], rest[3], Integer.parseInt(rest[4]));
            case "hold" -> hold(rest[0], rest[1]);
            case "failover" -> failover(rest[0], rest[1], Integer.parseInt(rest[2]));
            case "read" -> read(rest[0], Integer.parseInt(rest[1]), rest[2]);
            default -> throw new IllegalArgumentException("unknown mode " + mode);
        });
        System.exit(0);
    }

    // ------------------------------------------------------------------ modes

    static Map<String, Object> topics(String[] specs) throws Exception {
        short rf = 1;
        List<NewTopic> topics = new ArrayList<>();
        for (String spec : specs) {
            if (spec.startsWith("RF=")) {
                rf = Short.parseShort(spec.substring(3));
                continue;
            }
            String[] parts = spec.split(":");
            topics.add(new NewTopic(parts[0], Integer.parseInt(parts[1]), rf));
        }
        List<String> created = new ArrayList<>();
        try (Admin admin = Admin.create(clients.common())) {
            for (NewTopic t : topics) {
                try {
                    admin.createTopics(List.of(t)).all().get();
                    created.add(t.name());
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) {
                        throw e;
                    }
                }
            }
        }
        return Map.of("created", created);
    }

    /** N records (key k<i>, value PREFIX<i>, partition i % 2) in one transaction, committed or aborted. */
    static Map<String, Object> oneTransaction(String topic, String txid, int n, String prefix, boolean commit)
            throws Exception {
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(clients.transactionalProducer(txid))) {
            producer.initTransactions();
            producer.beginTransaction();
            List<List<Object>> sent = new ArrayList<>();
            List<java.util.concurrent.Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                acks.add(producer.send(Clients.record(topic, i % 2, "k" + i, prefix + i)));
            }
            producer.flush();           // on the log before the end: an abort has something to abort
            for (int i = 0; i < n; i++) {
                RecordMetadata md = acks.get(i).get();
                sent.add(List.of(md.partition(), md.offset(), "k" + i, prefix + i));
            }
            if (commit) {
                producer.commitTransaction();
            } else {
                producer.abortTransaction();
            }
            return Map.of("sent", sent);
        }
    }

    /** A producer whose transactional.id a newer producer takes over: the old one is fenced. */
    static Map<String, Object> fence(String topic, String txid) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        KafkaProducer<byte[], byte[]> old = new KafkaProducer<>(clients.transactionalProducer(txid));
        try {
            old.initTransactions();
            old.beginTransaction();
            old.send(Clients.record(topic, 0, "old", "zombie-open")).get();
            try (KafkaProducer<byte[], byte[]> fresh = new KafkaProducer<>(clients.transactionalProducer(txid))) {
                fresh.initTransactions();          // bumps the epoch and aborts the old open transaction
                fresh.beginTransaction();
                fresh.send(Clients.record(topic, 0, "new", "fresh-committed")).get();
                fresh.commitTransaction();
                out.put("fresh_committed", true);
            }
            // the zombie commits what it wrote before the takeover: its coordinator refuses the old epoch
            try {
                old.commitTransaction();
                out.put("old_commit_error", null);
            } catch (Throwable e) {
                out.put("old_commit_error", CheckOutput.unwrap(e).getClass().getSimpleName());
            }
            // and anything it writes afterwards fails too
            try {
                old.send(Clients.record(topic, 0, "old", "zombie-late")).get();
                out.put("old_send_error", null);
            } catch (Throwable e) {
                out.put("old_send_error", CheckOutput.unwrap(e).getClass().getSimpleName());
            }
        } finally {
            old.close(Duration.ofSeconds(5));
        }
        return out;
    }

    /** A transaction left open past its timeout: the coordinator aborts it; the producer then fails. */
    static Map<String, Object> timeout(String topic, String txid, int timeoutMs) throws Exception {
        Properties p = clients.transactionalProducer(txid);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(timeoutMs));
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(Clients.record(topic, 0, "t", "expired")).get();
            // the LSO is held at the open transaction's first offset until the coordinator aborts it
            long deadline = System.currentTimeMillis() + timeoutMs + 30_000;
            long waited = System.currentTimeMillis();
            Properties cp = clients.consumer(null, "read_committed");
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp)) {
                TopicPartition tp = new TopicPartition(topic, 0);
                long end = c.endOffsets(List.of(tp)).get(tp);
                out.put("lso_while_open", end);
                while (System.currentTimeMillis() < deadline && c.endOffsets(List.of(tp)).get(tp) == end) {
                    Thread.sleep(200);
                }
                out.put("lso_after_expiry", c.endOffsets(List.of(tp)).get(tp));
                out.put("expired_after_ms", System.currentTimeMillis() - waited);
            }
            try {
                producer.send(Clients.record(topic, 0, "t", "after-expiry")).get();
                producer.commitTransaction();
                out.put("commit_error", null);
            } catch (Throwable e) {
                out.put("commit_error", CheckOutput.unwrap(e).getClass().getSimpleName());
            }
        }
        return out;
    }

    /**
     * Consume-transform-produce (KIP-447): records of IN are read (read_committed) by a member of
     * GROUP; each one goes to OUT upper-cased in a transaction that also holds the consumed
     * offsets (sendOffsetsToTransaction with the consumer's group metadata). The second
     * transaction is aborted on purpose and the consumer rewound to the committed offsets, so
     * that its records are processed again in the next one: OUT must hold each record once.
     */
    static Map<String, Object> consumeTransformProduce(String in, String outTopic, String group, String txid,
                                                       int n) throws Exception {
        Properties cp = clients.consumer(group, "read_committed");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "25");
        int committedTxns = 0;
        int abortedTxns = 0;
        int processed = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(clients.transactionalProducer(txid))) {
            producer.initTransactions();
            consumer.subscribe(List.of(in));
            long deadline = System.currentTimeMillis() + 60_000;
            while (processed < n && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    producer.send(new ProducerRecord<>(outTopic, r.partition(), r.key(),
                            Clients.bytes(Clients.str(r.value()).toUpperCase())));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                if (committedTxns == 1 && abortedTxns == 0) {
                    producer.abortTransaction();
                    abortedTxns++;
                    // back to what the group committed: these records are processed again
                    Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(consumer.assignment());
                    for (TopicPartition tp : consumer.assignment()) {
                        OffsetAndMetadata om = committed.get(tp);
                        consumer.seek(tp, om == null ? 0 : om.offset());
                    }
                    continue;
                }
                producer.commitTransaction();
                committedTxns++;
                processed += records.count();
            }
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(consumer.assignment());
            List<List<Object>> offsets = new ArrayList<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : committed.entrySet()) {
                offsets.add(List.of(e.getKey().partition(), e.getValue() == null ? -1 : e.getValue().offset()));
            }
            offsets.sort((a, b) -> Integer.compare((Integer) a.get(0), (Integer) b.get(0)));
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("processed", processed);
            out.put("committed_txns", committedTxns);
            out.put("aborted_txns", abortedTxns);
            out.put("group_offsets", offsets);
            return out;
        }
    }

    /** A transaction with one record per partition left open until stdin closes (for the tools). */
    static Map<String, Object> hold(String topic, String txid) throws Exception {
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(clients.transactionalProducer(txid))) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(Clients.record(topic, 0, "h", "held-0")).get();
            producer.send(Clients.record(topic, 1, "h", "held-1")).get();
            CheckOutput.print(Map.of("mode", "hold", "open", true));
            while (System.in.read() >= 0) {
                // wait for the caller to close stdin
            }
            producer.abortTransaction();
        }
        return Map.of("aborted", true);
    }

    /**
     * A transaction whose coordinator dies in the middle: N records written, the coordinator's
     * broker id printed; once the caller has SIGKILLed that broker (a line on stdin), N more
     * records and the commit, which a new coordinator (the new leader of the transaction's
     * __transaction_state partition) must complete.
     */
    static Map<String, Object> failover(String topic, String txid, int n) throws Exception {
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(clients.transactionalProducer(txid));
             Admin admin = Admin.create(clients.common())) {
            producer.initTransactions();
            producer.beginTransaction();
            List<java.util.concurrent.Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                acks.add(producer.send(Clients.record(topic, i % 2, "k" + i, "before-" + i)));
            }
            producer.flush();
            int coordinator = admin.describeTransactions(List.of(txid)).description(txid).get().coordinatorId();
            CheckOutput.print(Map.of("mode", "failover", "coordinator", coordinator));
            new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
            for (int i = n; i < 2 * n; i++) {
                acks.add(producer.send(Clients.record(topic, i % 2, "k" + i, "after-" + i)));
            }
            producer.commitTransaction();
            List<List<Object>> sent = new ArrayList<>();
            for (int i = 0; i < 2 * n; i++) {
                RecordMetadata md = acks.get(i).get();
                sent.add(List.of(md.partition(), md.offset(), "k" + i, (i < n ? "before-" : "after-") + i));
            }
            int after = admin.describeTransactions(List.of(txid)).description(txid).get().coordinatorId();
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("sent", sent);
            out.put("coordinator_after", after);
            return out;
        }
    }

    /** Every record of TOPIC up to its end offsets as the consumer sees them (the LSO under read_committed). */
    static Map<String, Object> read(String topic, int partitions, String isolation) {
        List<TopicPartition> tps = Clients.partitions(topic, partitions);
        List<List<Object>> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> c = clients.readerFromStart(topic, partitions, isolation)) {
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            long deadline = System.currentTimeMillis() + 30_000;
            while (!reached(c, end) && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    // (Arrays.asList: a null key or value stays null)
                    got.add(java.util.Arrays.asList(r.partition(), r.offset(), Clients.str(r.key()),
                            Clients.str(r.value())));
                }
            }
            List<Object> ends = new ArrayList<>();
            for (TopicPartition tp : tps) {
                ends.add(end.get(tp));
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("records", got);
            out.put("end", ends);
            out.put("complete", reached(c, end));
            return out;
        }
    }

    // ------------------------------------------------------------------ helpers

    static boolean reached(KafkaConsumer<byte[], byte[]> c, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            if (c.position(e.getKey()) < e.getValue()) {
                return false;
            }
        }
        return true;
    }
}
