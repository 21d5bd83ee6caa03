// Kafka's Java clients on secured listeners, one JVM for every case: for each NAME=FILE argument
// (FILE: client properties with bootstrap.servers), produce three records to topic java-NAME and
// read them back; prints one JSON line per case: {"case", "ok", "records", "error"} where error
// is the exception's class and message (an authentication failure is expected for some cases).
import java.io.FileInputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class SecureClients {
    static String quote(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(' ');
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static Throwable root(Throwable t) {
        while (t.getCause() != null && t.getCause() != t
               && !(t instanceof org.apache.kafka.common.errors.AuthenticationException)) t = t.getCause();
        return t;
    }

    public static void main(String[] args) throws Exception {
        for (String arg : args) {
            String name = arg.substring(0, arg.indexOf('='));
            Properties base = new Properties();
            try (FileInputStream in = new FileInputStream(arg.substring(arg.indexOf('=') + 1))) { base.load(in); }
            String topic = "java-" + name;
            List<String> got = new ArrayList<>();
            String error = null;
            try {
                Properties p = new Properties();
                p.putAll(base);
                p.put("key.serializer", StringSerializer.class.getName());
                p.put("value.serializer", StringSerializer.class.getName());
                p.put("max.block.ms", "15000");
                p.put("delivery.timeout.ms", "20000");
                p.put("request.timeout.ms", "10000");
                try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                    for (int i = 0; i < 3; i++) producer.send(new ProducerRecord<>(topic, "k" + i, name + "-" + i)).get();
                }
                Properties c = new Properties();
                c.putAll(base);
                c.put("key.deserializer", StringDeserializer.class.getName());
                c.put("value.deserializer", StringDeserializer.class.getName());
                c.put("default.api.timeout.ms", "15000");
                try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                    TopicPartition tp = new TopicPartition(topic, 0);
                    consumer.assign(Collections.singletonList(tp));
                    consumer.seekToBeginning(Collections.singletonList(tp));
                    long end = System.currentTimeMillis() + 15000;
                    while (got.size() < 3 && System.currentTimeMillis() < end) {
                        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) got.add(r.value());
                    }
                }
            } catch (Exception e) {
                Throwable r = root(e);
                error = r.getClass().getName() + ": " + r.getMessage();
            }
            StringBuilder values = new StringBuilder("[");
            for (int i = 0; i < got.size(); i++) values.append(i > 0 ? "," : "").append(quote(got.get(i)));
            System.out.println("{\"case\":" + quote(name) + ",\"ok\":" + (error == null && got.size() == 3)
                               + ",\"records\":" + values.append("]") + ",\"error\":" + quote(error) + "}");
            System.out.flush();
        }
    }
}
