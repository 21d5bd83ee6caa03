import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka's Java clients for one bootstrap address as the checks (JavaClientCheck, TransactionCheck)
 * configure them: byte-array keys and values (UTF-8 text, null for none), idempotent acks=all
 * producers, consumers that commit only when told and start at the earliest offset.
 */
final class Clients {
    private final String bootstrap;
    private final long apiTimeoutMs;    // default.api.timeout.ms: how long a blocking call may take

    Clients(String bootstrap, long apiTimeoutMs) {
        this.bootstrap = bootstrap;
        this.apiTimeoutMs = apiTimeoutMs;
    }

    Properties common() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", String.valueOf(apiTimeoutMs));
        return p;
    }

    Properties producer() {
        Properties p = common();
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return p;
    }

    Properties transactionalProducer(String txid) {
        Properties p = producer();
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txid);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        return p;
    }

    /** A consumer of GROUP (none: null) at ISOLATION (read_committed or read_uncommitted). */
    Properties consumer(String group, String isolation) {
        Properties p = common();
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return p;
    }

    /** A consumer of no group assigned partitions 0..PARTITIONS-1 of TOPIC, each at its beginning. */
    KafkaConsumer<byte[], byte[]> readerFromStart(String topic, int partitions, String isolation) {
        List<TopicPartition> tps = partitions(topic, partitions);
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(consumer(null, isolation));
        c.assign(tps);
        c.seekToBeginning(tps);
        return c;
    }

    static List<TopicPartition> partitions(String topic, int partitions) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            tps.add(new TopicPartition(topic, p));
        }
        return tps;
    }

    /** A record of TOPIC's PARTITION with KEY and VALUE as UTF-8. */
    static ProducerRecord<byte[], byte[]> record(String topic, int partition, String key, String value) {
        return new ProducerRecord<>(topic, partition, bytes(key), bytes(value));
    }

    static byte[] bytes(String s) {
        return s == null ? null : s.getBytes(StandardCharsets.UTF_8);
    }

    static String str(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }
}
