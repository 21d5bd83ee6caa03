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
 * One consumer of a group with the group protocol it is given: args BOOTSTRAP GROUP TOPIC
 * PROTOCOL (classic, or consumer: Kafka 4's KIP-848 protocol) [ASSIGNORS: a classic consumer's
 * partition.assignment.strategy]. It subscribes, and on every poll prints the records it got and
 * commits their offsets synchronously; one JSON line per event on stdout, each with the
 * wall-clock time in ms ("t"), so that the owners of a partition over time can be compared
 * across members:
 *   {"event":"assigned","t":..,"partitions":[..]}  {"event":"revoked","t":..,"partitions":[..]}
 *   {"event":"records","t":..,"offsets":[[p,o],..]} {"event":"committed","t":..,"offsets":{"p":next,..}}
 *   {"event":"error","t":..,"message":".."}         {"event":"closed","t":..}
 * A line "stop" on stdin makes it leave the group (close) and exit. Used by
 * tests/cluster/test_consumer_protocol_cluster.py and tests/coordinator/test_group_migration.py
 * (through group_member.py).
 */
public final class GroupMember {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2], protocol = args[3];
        Properties p = new Clients(bootstrap, 60_000).consumer(group, "read_committed");
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        if (protocol.equals("classic")) {
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "300");
            if (args.length > 4) {
                p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, args[4]);
            }
        }
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
                    ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(100));
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
        System.out.println("{\"event\":\"" + event + "\",\"t\":" + System.currentTimeMillis()
                           + (rest == null ? "" : "," + rest) + "}");
        System.out.flush();
    }
}
