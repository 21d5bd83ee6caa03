"""Kafka's own Java transactional producer and consumers against a seglog broker or cluster: the
program (commit, abort, sendOffsetsToTransaction, fencing, both isolation levels), compiled with
javac against the cached Kafka client jars, run, and the check of the rows it prints.
Used by tests/broker/test_transactions.py and tests/cluster/test_transactions_cluster.py."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import kafka_reference

# kafka-clients and what it loads at run time (codecs, slf4j and log4j2)
JAVA_CLIENT_JARS = ("kafka-clients-", "lz4-java-", "snappy-java-", "zstd-jni-", "slf4j-api-", "log4j-api-",
                    "log4j-core-", "log4j-slf4j-impl-")

JAVA_SOURCE = r"""
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.*;

public class JavaTransactions {
    static String bootstrap;

    static KafkaProducer<String, String> producer(String tid) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", tid);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        KafkaProducer<String, String> pr = new KafkaProducer<>(p);
        pr.initTransactions();
        return pr;
    }

    static KafkaConsumer<String, String> consumer(String group, String isolation) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("isolation.level", isolation);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        return new KafkaConsumer<>(c);
    }

    static List<String> readAll(String topic, String isolation) {
        List<String> out = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer("reader-" + isolation, isolation)) {
            c.assign(Arrays.asList(new TopicPartition(topic, 0), new TopicPartition(topic, 1)));
            c.seekToBeginning(c.assignment());
            // until 1.5 s without a record once records came (a commit's markers follow its answer)
            long deadline = System.currentTimeMillis() + 30000, quiet = deadline;
            while (System.currentTimeMillis() < Math.min(deadline, quiet)) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    out.add(r.value());
                    quiet = System.currentTimeMillis() + 1500;
                }
            }
        }
        Collections.sort(out);
        return out;
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        KafkaProducer<String, String> p = producer("java-tx");
        p.beginTransaction();
        for (int i = 0; i < 6; i++) p.send(new ProducerRecord<>("jt", i % 2, null, "c" + i));
        p.commitTransaction();
        p.beginTransaction();
        for (int i = 0; i < 4; i++) p.send(new ProducerRecord<>("jt", i % 2, null, "a" + i));
        p.flush();
        p.abortTransaction();
        // consume-transform-produce with the group's offsets in the transaction
        try (KafkaConsumer<String, String> c = consumer("java-eos", "read_committed")) {
            c.subscribe(Collections.singletonList("jin"));
            int seen = 0;
            long deadline = System.currentTimeMillis() + 20000;
            p.beginTransaction();
            while (seen < 4 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    p.send(new ProducerRecord<>("jt", r.partition(), null, "t-" + r.value()));
                    seen++;
                }
            }
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (TopicPartition tp : c.assignment()) offsets.put(tp, new OffsetAndMetadata(c.position(tp)));
            p.sendOffsetsToTransaction(offsets, c.groupMetadata());
            p.commitTransaction();
            System.out.println("{\"scenario\":\"eos\",\"seen\":" + seen + "}");
        }
        try (KafkaConsumer<String, String> c = consumer("java-eos", "read_committed")) {
            Map<TopicPartition, OffsetAndMetadata> got = c.committed(
                new HashSet<>(Arrays.asList(new TopicPartition("jin", 0), new TopicPartition("jin", 1))));
            long total = 0;
            for (OffsetAndMetadata o : got.values()) total += o == null ? 0 : o.offset();
            System.out.println("{\"scenario\":\"committed\",\"total\":" + total + "}");
        }
        // a second producer of the same id fences the first
        KafkaProducer<String, String> p2 = producer("java-tx");
        String fenced = "none";
        try {
            p.beginTransaction();
            p.send(new ProducerRecord<>("jt", 0, null, "zombie")).get();
            p.commitTransaction();
        } catch (Exception e) {
            Throwable t = e;
            while (t.getCause() != null && !(t instanceof ProducerFencedException)) t = t.getCause();
            fenced = t.getClass().getSimpleName();
        }
        p.close(Duration.ofSeconds(2));
        p2.beginTransaction();
        p2.send(new ProducerRecord<>("jt", 1, null, "p2"));
        p2.commitTransaction();
        p2.close();
        System.out.println("{\"scenario\":\"fenced\",\"error\":\"" + fenced + "\"}");
        System.out.println("{\"scenario\":\"read_committed\",\"values\":\"" + String.join(",", readAll("jt", "read_committed")) + "\"}");
        System.out.println("{\"scenario\":\"read_uncommitted\",\"count\":" + readAll("jt", "read_uncommitted").size() + "}");
    }
}
"""


class JavaTransactions:
    """The program compiled into `folder`; skips the test when javac/java or Kafka's jars are
    missing."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.javac, self.java = shutil.which("javac"), shutil.which("java")
        if self.javac is None or self.java is None:
            pytest.skip("no javac/java on PATH")
        try:
            self.jars = kafka_reference.resolve_jars()
        except (kafka_reference.KafkaUnavailable, OSError) as exc:
            pytest.skip(f"Apache Kafka unavailable: {exc}")
        self.classpath = ":".join(str(j) for j in self.jars.jars if j.name.startswith(JAVA_CLIENT_JARS))
        (folder / "JavaTransactions.java").write_text(JAVA_SOURCE)
        built = subprocess.run([self.javac, "-d", str(folder), "-cp", self.classpath,
                                str(folder / "JavaTransactions.java")],
                               capture_output=True, text=True, timeout=180)
        assert built.returncode == 0, built.stderr

    def run(self, bootstrap: str, timeout: float) -> dict:
        """The rows the program prints, by scenario (topics jt and jin exist, jin holds 4 values)."""
        run = subprocess.run([self.java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                              f"-Dlog4j2.configurationFile={self.jars.folder / 'log4j2-tools.properties'}",
                              "-cp", f"{self.folder}:{self.classpath}", "JavaTransactions", bootstrap],
                             capture_output=True, text=True, timeout=timeout)
        assert run.returncode == 0, run.stderr[-4000:]
        return {r["scenario"]: r for r in map(json.loads, run.stdout.splitlines())}


def check_java_rows(rows: dict) -> None:
    """What JavaTransactions reports when every step did what Kafka does (one broker or a cluster)."""
    assert rows["eos"]["seen"] == 4
    assert rows["committed"]["total"] == 4
    assert rows["fenced"]["error"] == "ProducerFencedException", rows
    expected = sorted([f"c{i}" for i in range(6)] + [f"t-in{i}" for i in range(4)] + ["p2"])
    assert rows["read_committed"]["values"].split(",") == expected
    assert rows["read_uncommitted"]["count"] == len(expected) + 4
