import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * One member of a consumer group with Kafka 4's consumer group protocol (group.protocol=consumer,
 * KIP-848): args BOOTSTRAP GROUP TOPIC. It subscribes, and on every poll prints the records it
 * got and commits their offsets synchronously, one JSON line per event on stdout:
 *   {"event":"assigned","partitions":[..]}   {"event":"revoked","partitions":[..]}
 *   {"event":"records","offsets":[[p,o],..]} {"event":"committed","offsets":{"p":next,..}}
 *   {"event":"error","message":".."}          {"event":"closed"}
 * A line "stop" on stdin makes it leave the group (close) and exit.
 */
public final class ConsumerProtocolMember {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2];
        Clients clients = new Clients(bootstrap, 60_000);
        Properties p = clients.consumer(group, "read_committed");
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        AtomicBoolean stop = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.trim().equals("stop")) {
                        break;
                    }
                }
            } catch (Exception e) {
                // stdin closed: stop as well
            }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    print("revoked", "\"partitions\":" + numbers(parts));
                }

                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    print("assigned", "\"partitions\":" + numbers(parts));
                }
            });
            while (!stop.get()) {
                try {
                    ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(200));
                    if (records.isEmpty()) {
                        continue;
                    }
                    StringBuilder offsets = new StringBuilder("[");
                    Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        if (offsets.length() > 1) {
                            offsets.append(',');
                        }
                        offsets.append('[').append(r.partition()).append(',').append(r.offset()).append(']');
                        next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    print("records", "\"offsets\":" + offsets + "]");
                    c.commitSync(next);
                    StringBuilder committed = new StringBuilder("{");
                    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : next.entrySet()) {
                        if (committed.length() > 1) {
                            committed.append(',');
                        }
                        committed.append('"').append(e.getKey().partition()).append("\":").append(e.getValue().offset());
                    }
                    print("committed", "\"offsets\":" + committed + "}");
                } catch (Exception e) {
                    // a commit refused while partitions move, a coordinator gone: the consumer goes on
                    print("error", "\"message\":\"" + String.valueOf(e).replace("\\", "/").replace("\"", "'") + "\"");
                }
            }
        }
        print("closed", null);
    }

    static String numbers(Collection<TopicPartition> parts) {
        List<Integer> out = new ArrayList<>();
        for (TopicPartition tp : parts) {
            out.add(tp.partition());
        }
        out.sort(null);
        return out.toString();
    }

    static synchronized void print(String event, String rest) {
        System.out.println("{\"event\":\"" + event + "\"" + (rest == null ? "" : "," + rest) + "}");
        System.out.flush();
    }
}
